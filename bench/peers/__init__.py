"""Quiver next to the systems users would pick instead, driven by `python -m bench`.

servers.py      peer server processes (install, start on 127.0.0.1, stop by PID)
base.py         the System interface, latency stats, pacing, worker processes
<system>.py     one driver each: quiver_system, redis_streams, jetstream, rabbitmq, ceilings
worker.py       child process: a concurrent producer or the live e2e consumer
registry.py     system names and aliases
runner.py       workloads, counts, repeats, progress bar
report.py       JSON, markdown tables, targets, PNG plot
"""
