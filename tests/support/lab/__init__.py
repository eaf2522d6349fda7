"""The test lab: real SSH hosts (network namespaces + sshd) started on this machine."""

from tests.support.lab.lab import Lab, LabCommandError, LabUnsupported
from tests.support.lab.layout import LabHost, destroy_lab_dir

__all__ = ["Lab", "LabCommandError", "LabHost", "LabUnsupported", "destroy_lab_dir"]
