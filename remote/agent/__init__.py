"""Code that runs ON the hosts, and nothing else: the host-side agent.

The modules here are joined into one program (`connect/session/program.py`, its `AGENT_FILES`)
and sent over SSH to the host's own Python, which runs it with the standard library only:
nothing of tfctl is installed on a host. The shell programs hosts run (`*.sh`) live here too.
An import contract (`scripts/lint`) keeps this package free of tfctl's other modules and of
third-party packages.

tfctl keeps the program on the host as `<workdir>/.tfctl/agent/agent_<hash>.py` (installed by
`agentclient.BOOT` when missing) and runs it as a session (`optable.serve`): one JSON request
per line in, one answer per line out, for as long as the command runs, so an operation costs a
line each way rather than an interpreter start. Every request and answer is a record of
`vocab.py` (a `Wire`, `wirerecord.py`); `optable.py` names every operation, its handler and
its request. The operations:
`hostops.py` (the host itself: probe, ports, listen, connect, procs, sync_diff, put_files),
`runops.py` (a run: prepare, launch, wait_ports, status, stop, finish, runs, logs), `up.py`
(`up` in two requests), `lost.py` (restart_lost), `lab.py` and `tickets.py` (the shared lab:
lab, claims, reserve, release, gpu_state, the queue's tickets). What they use: `wire.py` (the
line markers, the version, `AgentError`), `rundir.py` (the run directory's layout),
`jsonfile.py` (records on disk), `keeper.py`, `supervisor.py` and `tasklog.py` (the run's one
process on a host, a task as one of its threads, and its log), `detach.py` (detached
processes), and the modules named for what they read or keep (`proc.py`, `state.py`,
`watch.py`, `claims.py`, ...).

Rules for the agent's modules: stdlib only, Python >= 3.8, Linux (/proc), no tfctl imports (the
`from tfctl...` lines are only for running the same code in-process and are cut from the
program sent to hosts), and no top-level name defined in two files (on a host they are one
module). An import the agent needs only in one operation is made there: every start pays for
the top-level ones.
"""
