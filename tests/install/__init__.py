"""The project as shipped: the wheel, README commands, system packages, import graph and layers."""
