"""ringmasterd refuses a database whose schema is newer than it knows: exit
status 1, one line naming the problem, and the database file is unchanged."""
import hashlib
import os
import sqlite3
import subprocess

from rmtest import Daemon, check, run, free_port


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main(binary, workdir, daemons):
    d = Daemon(binary, workdir)
    daemons.append(d)
    d.start()
    d.submit()
    check(d.stop() == 0, "clean stop")

    db = sqlite3.connect(d.db)
    cols = db.execute("PRAGMA table_info(schema_migrations)").fetchall()
    check(cols, "no schema_migrations table")
    names, values = [], []
    for _, name, ctype, _, _, _ in cols:
        names.append(name)
        if "version" in name:
            values.append(9999)
        elif "INT" in (ctype or "").upper():
            values.append(0)
        else:
            values.append("from-the-future")
    db.execute("INSERT INTO schema_migrations (%s) VALUES (%s)" % (",".join(names), ",".join("?" * len(values))), values)
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    before = sha(d.db)

    p = subprocess.run([binary, "--listen", "127.0.0.1:%d" % free_port(), "--broker",
                        "tcp://127.0.0.1:%d" % free_port(), "--db", d.db],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    err = p.stderr.decode()
    check(p.returncode == 1, "exit status %s, stderr %r" % (p.returncode, err))
    check("9999" in err and "newer" in err, "message does not explain: %r" % err)
    check(len(err.strip().splitlines()) == 1, "expected one line, got %r" % err)
    check(sha(d.db) == before, "the database file was modified")

    # other startup errors: one line, exit 1
    bad = [
        (["--listen", "nonsense"], "listen"),
        (["--log-level", "loud"], "log_level"),
        (["--bogus"], "--bogus"),
        (["--config", os.path.join(workdir, "missing.conf")], "missing.conf"),
    ]
    conf = os.path.join(workdir, "bad.conf")
    with open(conf, "w") as f:
        f.write("[server]\nhttp_threads = many\n")
    bad.append((["--config", conf], "http_threads"))
    conf2 = os.path.join(workdir, "unknown.conf")
    with open(conf2, "w") as f:
        f.write("[server]\nlisten_port = 3\n")
    bad.append((["--config", conf2], "listen_port"))
    for args, word in bad:
        p = subprocess.run([binary] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        err = p.stderr.decode()
        check(p.returncode == 1 and word in err and len(err.strip().splitlines()) == 1,
              "%s: status %s, stderr %r" % (args, p.returncode, err))

    # port in use: the message names the address
    s = __import__("socket").socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    p = subprocess.run([binary, "--listen", "127.0.0.1:%d" % port, "--broker", "tcp://127.0.0.1:%d" % free_port(),
                        "--db", os.path.join(workdir, "other", "x.db")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    s.close()
    err = p.stderr.decode()
    check(p.returncode == 1 and ("127.0.0.1:%d" % port) in err, "port in use: %s %r" % (p.returncode, err))

    # a config file is honoured, options override it
    conf3 = os.path.join(workdir, "good.conf")
    port = free_port()
    with open(conf3, "w") as f:
        f.write("[server]\nlisten = 127.0.0.1:1\nbroker = tcp://127.0.0.1:%d\ndb = %s\nlog_level = warn\n"
                "max_body_bytes = 4096\nhttp_threads = 2\n" % (free_port(), os.path.join(workdir, "conf", "c.db")))
    d2 = Daemon(binary, workdir, db=os.path.join(workdir, "conf", "c.db"), extra_args=["--config", conf3])
    daemons.append(d2)
    d2.start()
    st, h, raw = d2.request("POST", "/v1/jobs", b'{"name":"' + b"a" * 5000 + b'"}', {"Content-Type": "application/json"})
    check(st == 413, "max_body_bytes from the file: %s" % st)
    check(d2.stop() == 0, "clean stop")

    # --help, --version, --print-routes
    for opt in ("--help", "--version", "--print-routes"):
        p = subprocess.run([binary, opt], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        check(p.returncode == 0 and p.stdout, "%s: %s" % (opt, p.returncode))


if __name__ == "__main__":
    run(main)
