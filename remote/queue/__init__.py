"""The lab's queue: jobs that wait for GPUs, first come, first served, with every user's.

- ids.py: the ids of what waits and starts (`q-`, `s-`, `r-`), made and read there only;
- tickets.py: a waiting job's tickets on the hosts (what it wants; leaving, removing them);
- look.py: one look at the hosts (one `gpu_state` request each), which refreshes our tickets;
- turn.py: whether a job may start on a host now, and why not, as values (pure);
- points.py: where a one-off's or sweep's points go now (pure);
- record.py: this machine's typed record of a waiting job (`up --when-free` or a sweep), kept
  in `~/.cache/tfctl/queue/`, and where the records are;
- enqueue.py: queueing a job (tickets, record, waiter) and cancelling it;
- startrun.py: `tfctl run`'s decisions: what starts now and what queues in its sweep;
- upstart.py: an `up --when-free` job's start, in process, through the Engine; a lost race for
  its GPUs as a value;
- sweep.py: what a sweep's starts did to its points, and stopping a sweep;
- waiter.py: the one waiter loop, `python -m tfctl.remote.queue.waiter RECORD`.

The front ends (tui/cli/queue.py, tui/cli/run.py, `up --when-free`) read options, call these
and print.
"""
