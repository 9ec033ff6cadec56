"""bench.produce_cpu's no-socket producer: every send answered, a CPU figure per round."""

from bench import produce_cpu


def test_no_sockets_answers_every_send_and_measures_each_round():
    out = produce_cpu.no_sockets(64, n=3000, rounds=3)
    assert len(out["rounds"]) == 3 and all(v > 0 for v in out["rounds"])
    assert out["client_cpu_us_median"] in out["rounds"]


def test_threads_cpu_names_the_main_thread():
    import os
    assert any(k.startswith("main#") for k in produce_cpu.threads_cpu(os.getpid()))
