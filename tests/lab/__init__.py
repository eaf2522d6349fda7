"""Tests that need the lab of real sshd hosts (tests/support/lab), wholly or in part."""
