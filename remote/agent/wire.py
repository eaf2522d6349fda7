"""The agent's line protocol markers, shared by the agent (host) and agentclient (here).

Its own file, first in the agent program, so that the client can read them without importing the
agent's modules (~15 ms of every command's start).
"""

ANSWER_MARK = "\x1etfctl-answer "
"""Starts the line that carries an answer: nothing else a child prints is taken for one."""
ACK_LINE = "\x1etfctl-ack\n"
"""Sent as soon as a request line arrives: a silent idle session means a dead link."""
WIRE_VERSION = 1
"""The vocabulary's version (vocab.py): sent in every request (`v`) and every answer; a change
of a record that an older reader would misread takes the next number."""
