"""METRICS cadence: with `ringmasterd --metrics-every 5`, rank 0 of a 12-step
job that validates every 6 steps reports steps 5 and 10 (the cadence), 6 and
12 (validation, with val_loss) and 12 (the last step): exactly {5, 6, 10, 12}."""
from cluster import check, log, run, tiny_spec, wait_workers


def main(cluster, args):
    d = cluster.start_daemon(["--metrics-every", "5"])
    cluster.start_agent("m1", "cpu:2")
    wait_workers(d, ["m1"])
    job_id = d.submit(tiny_spec("metrics-every", 2, 4, 12, eval_every=6))["id"]
    d.wait_state(job_id, {"succeeded"}, timeout=120)
    rows = d.metrics(job_id)
    steps = sorted(int(r["step"]) for r in rows)
    log("metric rows at steps %s" % steps)
    check(steps == [5, 6, 10, 12], "expected rows at steps [5, 6, 10, 12], got %s" % steps)
    with_val = sorted(int(r["step"]) for r in rows if r.get("val_loss") is not None)
    check(with_val == [6, 12], "val_loss expected at steps [6, 12], got %s: %r" % (with_val, rows))


if __name__ == "__main__":
    run(main)
