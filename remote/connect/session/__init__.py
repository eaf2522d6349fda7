"""The agent session: the agent program sent to a host (`program`), the session that boots it and
carries requests and answers over one SSH channel (`agentclient`), and one function per
operation that builds the request and reads the answer in the agent's vocabulary (`agentops`)."""
