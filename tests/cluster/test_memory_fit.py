"""The memory fit (issue 22), with the real daemon and real agents.

A job's rank memory is estimated from its spec (api/memfit.c, the formula in
docs/jobspec.md); agents say in REGISTER how much host memory they offer
(--memory-bytes here, MemAvailable by default).

  - with no agent alive, a job too big for the agents that come later is
    taken, and then waits with the memory as its reason (never started);
  - with agents alive that all said, a job bigger than the largest is
    refused at submission with 422 naming the estimate and the largest node;
  - placement never puts a rank on a node with too little memory: a 2-rank
    job runs on the big node, not on the small one beside it;
  - the same too-big job at parallel.tensor 2 is taken (each rank holds
    about half) and waits with the TP estimate as its reason;
  - the estimate is within a factor of 2 of what the ranks report (METRICS
    params/grads/optim/activations bytes), for sharding none and zero1, and
    at parallel.tensor 2."""
import re

from cluster import check, log, model_section, run, tiny_spec, wait_until, wait_workers

GIB = 1 << 30


def big_spec(name):
    s = tiny_spec(name, 1, 8192, 4)  # 8192 x 32 tokens: about 1.6 GiB of activations
    return s


def estimate_from(text):
    m = re.search(r"needs about [0-9.]+ GiB per rank \((\d+) bytes", text)
    check(m, "no estimate in %r" % text)
    return int(m.group(1))


def main(cluster, args):
    d = cluster.start_daemon()

    # 1. No agent yet: taken, then waits with the memory reason once a small
    # agent is there.
    waiting = d.submit(big_spec("waits-for-memory"))["id"]
    cluster.start_agent("n1-small", "cpu:2", extra_args=["--memory-bytes", str(GIB)])
    wait_workers(d, ["n1-small"])

    def reason():
        r = d.job(waiting).get("state_reason") or ""
        return r if "memory" in r else None
    r = wait_until("the memory reason", reason, 30)
    check(d.job(waiting)["state"] == "queued" and "GiB per rank" in r, "waiting job: %r" % r)
    log("a job too big for the alive workers waits: %s" % r)

    # 2. Refused at submission: the estimate and the largest node named.
    st, body = d.request("POST", "/v1/jobs", big_spec("too-big"))
    text = body.decode("utf-8", "replace")
    check(st == 422 and "n1-small" in text and "1.00 GiB" in text and "GiB per rank" in text,
          "too big a job: %s %s" % (st, text))
    est_big = estimate_from(text)
    check(GIB < est_big < 4 * GIB, "estimate %d for ~1.6 GiB of activations" % est_big)
    check(abs(est_big - memfit_estimate(big_spec("x"))) <= 2,
          "the daemon's estimate %d is not docs/jobspec.md's formula (%d)" %
          (est_big, memfit_estimate(big_spec("x"))))
    log("refused at submission: %s" % text)

    # 2b. The same job split 2 ways (parallel.tensor 2, issue 24): each
    # rank holds about half, so it is taken; two such ranks do not fit the
    # small node together, so it waits with its estimate in the reason.
    split = big_spec("too-big-split")
    split["parallel"].update(world_size=2, tensor=2)
    split_id = d.submit(split)["id"]

    def split_reason():
        r = d.job(split_id).get("state_reason") or ""
        return r if "per rank" in r else None
    r = wait_until("the split job's memory reason", split_reason, 30)
    est_split = estimate_from(r)
    check(abs(est_split - memfit_estimate(split)) <= 2 and est_split < GIB,
          "the split job's estimate %d, the formula %d" % (est_split, memfit_estimate(split)))
    d.json("POST", "/v1/jobs/%s/cancel" % split_id)
    log("at parallel.tensor 2 the job is taken: %d bytes per rank (%d at t = 1)" % (est_split, est_big))

    # 3. A big node beside the small one: the waiting job runs there, and a
    # 2-rank job that fits only the big one goes there whole.
    cluster.start_agent("n2-big", "cpu:2", extra_args=["--memory-bytes", str(64 * GIB)])
    wait_workers(d, ["n1-small", "n2-big"])
    # (each is cancelled once placed: what matters is where its ranks went)
    d.wait_state(waiting, {"scheduled", "running"}, timeout=60)
    nodes = {r["node"] for r in d.job(waiting)["ranks"]}
    check(nodes == {"n2-big"}, "the big job was placed on %s" % nodes)
    d.json("POST", "/v1/jobs/%s/cancel" % waiting)
    two = big_spec("two-on-big")
    two["parallel"]["world_size"] = 2
    two["train"]["batch_size"] = 4096
    job_id = d.submit(two)["id"]
    d.wait_state(job_id, {"scheduled", "running"}, timeout=60)
    nodes = sorted(r["node"] for r in d.job(job_id)["ranks"])
    check(nodes == ["n2-big", "n2-big"], "2-rank job placed on %s, the small node holds none" % nodes)
    d.json("POST", "/v1/jobs/%s/cancel" % job_id)
    log("placement: ranks on %s only" % nodes)

    # 4. The estimate (the formula, checked against the daemon's above)
    # against what the ranks report they hold.
    for sharding, arch, tensor in (("none", "gpt2", 1), ("zero1", "gpt2", 1), ("zero1", "llama", 1),
                                   ("zero1", "gpt2", 2), ("none", "llama", 2),
                                   ("zero3", "llama", 2)):
        s = tiny_spec("fit-%s-%s-t%d" % (sharding, arch, tensor), 2, 64, 3, tensor=tensor)
        s["model"] = model_section(arch, 2, 2 * tensor, 64, 32)  # KV heads divide by t too
        s["parallel"]["sharding"] = sharding
        job_id = d.submit(s)["id"]
        d.wait_state(job_id, {"succeeded"}, timeout=300)
        ranks = d.job(job_id)["ranks"]
        reported = [sum(r["memory"][k] for k in ("params_bytes", "grads_bytes", "optim_bytes",
                                                   "activations_bytes")) for r in ranks if r.get("memory")]
        check(len(reported) == 2, "both ranks reported their memory: %r" % ranks)
        est = memfit_estimate(s)
        for got in reported:
            check(est / 2 <= got <= est * 2, "sharding %s: estimate %d, a rank reported %d" %
                  (sharding, est, got))
        log("%s, sharding %s, tensor %d: estimate %d bytes, ranks reported %s" %
            (arch, sharding, tensor, est, reported))


def memfit_estimate(s):
    """docs/jobspec.md's formula (api/memfit.c), here so the test states it."""
    m, t, p = s["model"], s["train"], s["parallel"]
    L, C, V, H, T, B = m["n_layer"], m["n_embd"], m["vocab_size"], m["n_head"], m["seq_len"], t["batch_size"]
    W = p["world_size"]
    layer = 12 * C * C + 13 * C
    P = V * C + T * C + L * layer + 2 * C
    if m.get("arch") == "llama":  # no positions or biases; GQA, SwiGLU, an untied head
        KVC, F = C // H * m["n_kv_head"], m["ffn_dim"]
        layer = 2 * C * C + 2 * C * KVC + 3 * C * F + 2 * C
        P = V * C * (1 if m.get("tie_embeddings") else 2) + L * layer + C
    sharding = p.get("sharding", "none")
    t = p.get("tensor", 1)
    if t > 1:  # a TP rank's part; zero2/3 stream a layer's local part
        llama = m.get("arch") == "llama"
        R = 2 * L * C + C if llama else T * C + 6 * L * C + 2 * C
        E = 2 if llama and not m.get("tie_embeddings") else 1
        Vp = -(-V // t) * t
        P = (P - R + (Vp - V) * C * E) / t + R
        r = 2 * C if llama else 6 * C  # a layer's replicated floats
        layer = (layer - r) / t + r
        W //= t
    S = -(-P // W)
    params, grads, optim = {
        "none": (4 * P, 4 * P, 8 * P),
        "zero1": (4 * P, 4 * P + 4 * S, 8 * S),
        "zero2": (4 * P, 4 * S + 4 * layer, 8 * S),
        "zero3": (4 * S + 4 * layer, 4 * S + 4 * layer, 8 * S),
    }[sharding]
    N = B * T
    floats = N * (8 * C + V + 4) + B * C * (T + 16) + N * H * T + L * N * (12 * C + 4 + H * T)
    act = 4 * floats + 8 * N + 64 * 32
    if t > 1:  # sequence parallelism: 1/t plus the all-gathered (B, T, C) pair
        act = act / t + 8 * B * T * C
    return int(params + grads + optim + act)


if __name__ == "__main__":
    run(main)
