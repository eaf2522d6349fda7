"""The test lab: real SSH hosts (network namespaces + sshd) started on this machine."""

from tests.lab.lab import Lab, LabCommandError, LabUnsupported
from tests.lab.layout import LabHost, destroy_lab_dir

__all__ = ["Lab", "LabCommandError", "LabHost", "LabUnsupported", "destroy_lab_dir"]
