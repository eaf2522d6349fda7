"""What the tests share: the lab of sshd hosts (lab/), the test-only stand-ins for
programs the hosts run (fakes/), recorded data (data/) and the helpers the test folders import."""
