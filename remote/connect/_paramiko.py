"""paramiko, imported without invoke: every module of tfctl takes paramiko from here.

paramiko imports invoke (and with it unittest.mock: ~45 ms of every command's start) only to
evaluate `Match exec` blocks of ssh configs. Its import is held off while paramiko loads, and
`load_invoke` hands it over when a config has such a block (sshconfig.lookup). A command that
connects imports invoke anyway, with Fabric (connection.py); what imports paramiko alone (the
ssh config fallback, the host-key checks) stays without it.
"""

from __future__ import annotations

import sys

_held_off = "invoke" not in sys.modules
if _held_off:
    sys.modules["invoke"] = None  # type: ignore[assignment]  # an import of it fails at once
try:
    import paramiko
    import paramiko.config
finally:
    if _held_off and "invoke" in sys.modules and sys.modules["invoke"] is None:
        del sys.modules["invoke"]

__all__ = ["load_invoke", "paramiko"]


def load_invoke() -> bool:
    """Give paramiko's config parser invoke after all; False if it is not installed."""
    try:
        import invoke
    except ImportError:
        return False
    paramiko.config.invoke = invoke  # type: ignore[attr-defined]
    return True
