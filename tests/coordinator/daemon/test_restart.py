"""ringmasterd restart: jobs survive SIGTERM + restart on the same database
with byte-identical JSON; READY=1, WATCHDOG=1 and STOPPING=1 arrive on NOTIFY_SOCKET;
SIGINT also stops cleanly."""
import json
import os
import signal
import socket
import time

from rmtest import Daemon, check, run


def read_notify(sock, want, timeout=15):
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        sock.settimeout(max(0.05, deadline - time.time()))
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            break
        seen.append(msg)
        if want in msg.split("\n"):
            return seen
    raise AssertionError("no %s on NOTIFY_SOCKET (got %r)" % (want, seen))


def main(binary, workdir, daemons):
    nsock_path = os.path.join(workdir, "notify.sock")
    nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    nsock.bind(nsock_path)
    d = Daemon(binary, workdir, env={"NOTIFY_SOCKET": nsock_path, "WATCHDOG_USEC": "400000"})
    daemons.append(d)
    d.start(wait=False)
    try:
        read_notify(nsock, "READY=1")
        read_notify(nsock, "WATCHDOG=1", timeout=3)  # every 200 ms from the writer loop
    except AssertionError as e:
        check(False, str(e))
    d.wait_ready()

    jobs = [d.submit({"name": "restart-%d \u2603 '; DROP TABLE jobs;--" % i,
                      "data": {"train": "d/%d.bin" % i}, "priority": i % 7}) for i in range(30)]
    for j in jobs[:5]:
        d.json("POST", "/v1/jobs/%s/cancel" % j["id"], expect=200)
    before = {}
    for j in jobs:
        st, _, raw = d.request("GET", "/v1/jobs/" + j["id"])
        check(st == 200, "show %s" % st)
        before[j["id"]] = raw
    _, _, list_before = d.request("GET", "/v1/jobs?limit=1000")
    events_before = {j["id"]: d.request("GET", "/v1/jobs/%s/events" % j["id"])[2] for j in jobs[:8]}

    rc = d.stop(signal.SIGTERM)
    check(rc == 0, "SIGTERM exit status %s" % rc)
    try:
        read_notify(nsock, "STOPPING=1", timeout=2)
    except AssertionError as e:
        check(False, str(e))

    d.start()
    for jid, raw in before.items():
        st, _, after = d.request("GET", "/v1/jobs/" + jid)
        check(st == 200 and after == raw, "job %s changed across restart:\n%r\n%r" % (jid, raw, after))
    _, _, list_after = d.request("GET", "/v1/jobs?limit=1000")
    check(list_after == list_before, "list changed across restart")
    for jid, raw in events_before.items():
        check(d.request("GET", "/v1/jobs/%s/events" % jid)[2] == raw, "events of %s changed" % jid)
    name = json.loads(before[jobs[3]["id"]])["name"]
    check(name == "restart-3 \u2603 '; DROP TABLE jobs;--", "name not stored as sent: %r" % name)
    d.submit()

    rc = d.stop(signal.SIGINT)
    check(rc == 0, "SIGINT exit status %s" % rc)
    d.start()
    _, _, page = d.json("GET", "/v1/jobs?limit=1000", expect=200)
    check(len(page["jobs"]) == 31, "after second restart: %d jobs" % len(page["jobs"]))
    check(d.stop() == 0, "final stop")
    nsock.close()


if __name__ == "__main__":
    run(main)
