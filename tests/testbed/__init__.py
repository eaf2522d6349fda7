"""Tests that need the lab of real sshd hosts (tests/support/testbed), wholly or in part."""
