"""ringmasterd crash: kill -9 in the middle of a burst of concurrent
submissions from 8 threads; after a restart every job whose POST got 201 is
there with identical JSON, and nothing is half-written (every job parses and
has its submitted event)."""
import json
import threading
import time

from rmtest import Daemon, check, run


def main(binary, workdir, daemons):
    d = Daemon(binary, workdir)
    daemons.append(d)
    d.start()
    acked = {}
    lock = threading.Lock()
    stop = threading.Event()

    def poster(k):
        i = 0
        while not stop.is_set():
            try:
                c = d.conn(timeout=5)
                while not stop.is_set():
                    body = json.dumps({"name": "crash-%d-%d" % (k, i), "data": {"train": "c.bin"}})
                    i += 1
                    c.request("POST", "/v1/jobs", body=body,
                              headers=dict(d.auth_headers(), **{"Content-Type": "application/json"}))
                    r = c.getresponse()
                    raw = r.read()
                    if r.status == 201:
                        with lock:
                            acked[json.loads(raw)["id"]] = raw
            except Exception:
                time.sleep(0.01)

    threads = [threading.Thread(target=poster, args=(k,)) for k in range(8)]
    [t.start() for t in threads]
    deadline = time.time() + 10
    while time.time() < deadline:
        with lock:
            if len(acked) >= 150:
                break
        time.sleep(0.02)
    d.kill9()
    stop.set()
    [t.join() for t in threads]
    check(len(acked) > 0, "no POST succeeded before the kill")

    d.start()
    jobs = []
    cursor = None
    while True:
        _, _, page = d.json("GET", "/v1/jobs?limit=1000" + ("&cursor=" + cursor if cursor else ""), expect=200)
        jobs += page["jobs"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    ids = {j["id"] for j in jobs}
    missing = [i for i in acked if i not in ids]
    check(not missing, "%d acknowledged jobs lost (of %d), e.g. %s" % (len(missing), len(acked), missing[:3]))
    # GET /v1/jobs/{id} is the POST reply plus the ranks (none: never placed)
    ranks = b',"ranks":[]}'
    for jid, raw in acked.items():
        st, _, now = d.request("GET", "/v1/jobs/" + jid)
        check(st == 200 and now.endswith(ranks) and now[:-len(ranks)] + b"}" == raw,
              "job %s differs after the crash" % jid)
    for j in jobs:
        check(j["state"] == "queued" and j["spec"]["data"]["train"] == "c.bin" and j["name"].startswith("crash-"),
              "odd job %r" % j)
        _, _, ev = d.json("GET", "/v1/jobs/%s/events" % j["id"], expect=200)
        check(ev["events"] and ev["events"][0]["type"] == "submitted", "job %s has no submitted event" % j["id"])
    print("%d acknowledged, %d stored" % (len(acked), len(jobs)))
    check(d.stop() == 0, "clean stop after the crash recovery")


if __name__ == "__main__":
    run(main)
