"""The test lab: real SSH hosts (network namespaces + sshd) started on this machine."""

from tests.support.testbed.layout import LabHost, destroy_lab_dir
from tests.support.testbed.testbed import LabCommandError, LabUnsupported, Testbed

__all__ = ["LabCommandError", "LabHost", "LabUnsupported", "Testbed", "destroy_lab_dir"]
