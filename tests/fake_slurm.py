#!/usr/bin/env python3
"""A stand-in SLURM for the tests: sbatch, sacct, squeue, scancel, scontrol and srun on this one machine (stdlib).

State lives under $FAKE_SLURM_DIR (jobs/<key>.json, one per job or array task; key = "<id>" or "<id>_<idx>").
sbatch starts one detached controller per submission, which runs the batch script(s) (each in its own session,
so a job is one process group), records states, runs a task again when `scontrol requeue` flagged it, and kills
the job on scancel. `scancel --signal S` signals the job's processes except the batch shell and srun (as SLURM
signals the job steps, not the batch shell). submitit's own SLURM code runs unchanged against it.
"""
import fcntl
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("FAKE_SLURM_DIR", f"/tmp/fake_slurm_{os.getuid()}"))
JOBS = STATE / "jobs"
POLL_S = float(os.environ.get("FAKE_SLURM_POLL_S", "0.1"))
KILL_WAIT_S = float(os.environ.get("FAKE_SLURM_KILL_WAIT_S", "3"))
SECONDS_PER_MINUTE = float(os.environ.get("FAKE_SLURM_SECONDS_PER_MINUTE", "0"))  # 0: --time not enforced
REQUEUE_DELAY_S = float(os.environ.get("FAKE_SLURM_REQUEUE_DELAY_S", "0.2"))
ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "COMPLETING"}
NODE = "localhost"


# ---------------------------------------------------------------- state
class _Lock:
    def __enter__(self):
        STATE.mkdir(parents=True, exist_ok=True)
        self.f = open(STATE / "lock", "a+")
        fcntl.flock(self.f, fcntl.LOCK_EX)
    def __exit__(self, *a):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()

def read(key):
    try:
        return json.loads((JOBS / f"{key}.json").read_text())
    except FileNotFoundError:
        return None

def write(job):
    JOBS.mkdir(parents=True, exist_ok=True)
    tmp = JOBS / f".{job['key']}.json.tmp"
    tmp.write_text(json.dumps(job))
    os.replace(tmp, JOBS / f"{job['key']}.json")

def update(key, **fields):
    with _Lock():
        job = read(key)
        job.update(fields)
        write(job)
        return job

def all_jobs():
    return [json.loads(p.read_text()) for p in sorted(JOBS.glob("*.json"))] if JOBS.exists() else []

def resolve(ident):
    """'123' -> every task of 123; '123_4' -> that task; a task's raw SLURM_JOB_ID -> that task."""
    ident = ident.strip()
    out = [j for j in all_jobs() if j["key"] == ident or j["id"] == ident or j["raw_id"] == ident]
    return sorted(out, key=lambda j: (int(j["id"]), j["task"] if j["task"] is not None else -1))

def next_ids(n):
    with _Lock():
        f = STATE / "next_id"
        if f.exists():
            first = int(f.read_text())
        else:
            first = int(os.environ.get("FAKE_SLURM_FIRST_ID", int(time.time() * 10) % 10**8))
        f.write_text(str(first + n))
    return first


# ---------------------------------------------------------------- helpers
def sig_of(name):
    name = str(name).upper()
    if name.isdigit():
        return signal.Signals(int(name))
    return signal.Signals[name if name.startswith("SIG") else "SIG" + name]

def expand(pattern, job, task=None):
    rep = {"j": job["raw_id"], "A": job["id"], "a": str(job["task"]) if job["task"] is not None else "4294967294",
           "x": job["name"], "N": NODE, "u": os.environ.get("USER", "user"), "n": "0", "s": "0",
           "t": str(task) if task is not None else "0"}
    return re.sub(r"%(%|[jAaxNunst])", lambda m: "%" if m.group(1) == "%" else rep[m.group(1)], pattern)

def session_members(sid):
    """Every live process of the job's session (the batch shell is its leader); children that call setpgrp stay in
    it, only a setsid() escapes (e.g. a daemonising child)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                fields = stat[stat.rindex(")") + 2:].split()
                if int(fields[3]) == sid and fields[0] != "Z":
                    pids.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return pids

def requeue_in_flight(job):
    """True while the `scontrol requeue` that flagged the job has not returned yet (for at most KILL_WAIT_S)."""
    pid = job.get("requeue_pid")
    return bool(job["requeue_requested"] and pid and job.get("pgid") and time.time() < job["requeue_at"] + KILL_WAIT_S
                and pid in session_members(job["pgid"]))

def signal_job(job, sig, batch=False, full=False):
    pgid = job.get("pgid")
    if not pgid or job["state"] not in ("RUNNING", "REQUEUED", "COMPLETING"):
        return
    excluded = set() if full else {pgid, *job.get("srun_pids", [])}
    targets = [pgid] if batch else [p for p in session_members(pgid) if p not in excluded]
    for p in targets:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------- sbatch
def parse_sbatch_options(tokens, opts):
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if not t.startswith("-"):
            break
        if t.startswith("--") and "=" in t:
            k, v = t[2:].split("=", 1)
        elif t in ("--wait", "-W", "--parsable", "--exclusive", "--requeue", "--no-requeue", "-Q", "--quiet"):
            k, v = t.lstrip("-"), True
        else:
            k, v = t.lstrip("-"), tokens[i + 1]
            i += 1
        opts[{"J": "job-name", "o": "output", "e": "error", "a": "array", "t": "time", "N": "nodes",
              "n": "ntasks", "W": "wait", "D": "chdir"}.get(k, k)] = v
        i += 1
    return tokens[i:]

def sbatch(argv):
    opts = {}
    rest = parse_sbatch_options(argv, opts)
    script = Path(rest[0]).read_text()
    file_opts = {}
    for line in script.splitlines()[1:]:
        s = line.strip()
        if s.startswith("#SBATCH"):
            parse_sbatch_options(shlex.split(s[len("#SBATCH"):]), file_opts)
        elif s and not s.startswith("#"):
            break  # real sbatch stops reading directives at the first command
    opts = {**file_opts, **opts}  # command line wins
    tasks = [None]
    parallel = None
    if "array" in opts:
        spec, _, par = str(opts["array"]).partition("%")
        tasks = []
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            tasks += list(range(int(lo), int(hi or lo) + 1))
        parallel = int(par) if par else None
    first = next_ids(len(tasks))
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / "scripts").mkdir(exist_ok=True)
    script_copy = STATE / "scripts" / f"{first}.sh"
    script_copy.write_text(script)  # the caller may move/rename its file once sbatch returns (submitit does)
    nodes = int(opts.get("nodes", 1))
    ntasks = int(opts.get("ntasks", nodes * int(opts.get("ntasks-per-node", 1))))
    (STATE / "env").mkdir(exist_ok=True)
    (STATE / "env" / f"{first}.json").write_text(json.dumps(dict(os.environ)))  # --export=ALL
    base = {"id": str(first), "name": str(opts.get("job-name", Path(rest[0]).name)), "script": str(script_copy),
            "args": rest[1:], "workdir": str(opts.get("chdir", os.getcwd())), "nodes": nodes, "ntasks": ntasks,
            "output": opts.get("output", "slurm-%j.out" if tasks == [None] else "slurm-%A_%a.out"),
            "error": opts.get("error"), "signal": opts.get("signal"), "time": opts.get("time"),
            "state": "PENDING", "exit_code": None, "restarts": 0, "pgid": None, "srun_pids": [],
            "requeue_requested": False, "cancel_requested": False, "submit": time.time(), "start": None,
            "end": None, "n_tasks_array": len(tasks), "array_parallelism": parallel}
    with _Lock():
        for k, t in enumerate(tasks):
            key = str(first) if t is None else f"{first}_{t}"
            write({**base, "key": key, "task": t, "raw_id": str(first + k)})
    ctl = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_controller", str(first)],
                           stdin=subprocess.DEVNULL, stdout=open(STATE / f"controller_{first}.log", "ab"),
                           stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    print(first if opts.get("parsable") else f"Submitted batch job {first}", flush=True)
    if opts.get("wait"):
        while any(j["state"] in ACTIVE for j in resolve(str(first))):
            time.sleep(POLL_S)
        ctl.wait()
        return max((j["exit_code"] or 0) for j in resolve(str(first)))
    return 0


# ---------------------------------------------------------------- controller (one per submission)
def launch(key):
    job = read(key)
    env = json.loads((STATE / "env" / f"{job['id']}.json").read_text())
    arr = job["task"] is not None
    if job["nodes"] == 1:
        nodelist = NODE
    else:
        nodelist = ",".join(["localhost"] + [f"127.0.0.{i + 1}" for i in range(1, job["nodes"])])
    env.update(SLURM_JOB_ID=job["raw_id"], SLURM_JOBID=job["raw_id"], SLURM_JOB_NAME=job["name"],
               SLURM_NTASKS=str(job["ntasks"]), SLURM_NPROCS=str(job["ntasks"]),
               SLURM_NTASKS_PER_NODE=str(max(1, job["ntasks"] // job["nodes"])),
               SLURM_JOB_NUM_NODES=str(job["nodes"]), SLURM_NNODES=str(job["nodes"]),
               SLURM_JOB_NODELIST=nodelist,
               SLURM_NODEID="0", SLURM_PROCID="0", SLURM_LOCALID="0", SLURMD_NODENAME=NODE,
               SLURM_SUBMIT_DIR=job["workdir"], SLURM_SUBMIT_HOST=socket.gethostname(),
               SLURM_CLUSTER_NAME="fake", SLURM_JOB_PARTITION="fake", FAKE_SLURM_KEY=key, FAKE_SLURM_DIR=str(STATE))
    if arr:
        env.update(SLURM_ARRAY_JOB_ID=job["id"], SLURM_ARRAY_TASK_ID=str(job["task"]),
                   SLURM_ARRAY_TASK_COUNT=str(job["n_tasks_array"]))
    if job["restarts"]:
        env["SLURM_RESTART_COUNT"] = str(job["restarts"])
    env["SLURM_OPEN_MODE"] = "a"
    out = Path(expand(job["output"], job))
    out.parent.mkdir(parents=True, exist_ok=True)
    err = Path(expand(job["error"], job)) if job["error"] else None
    fo = open(out, "ab")
    fe = open(err, "ab") if err else subprocess.STDOUT
    proc = subprocess.Popen(["bash", job["script"], *job["args"]], cwd=job["workdir"], env=env,
                            stdin=subprocess.DEVNULL, stdout=fo, stderr=fe, start_new_session=True)
    update(key, state="RUNNING", pgid=proc.pid, srun_pids=[], start=time.time(), node=NODE)
    return proc

def minutes(spec):
    """Slurm --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (enough of it)."""
    spec = str(spec)
    days = 0
    if "-" in spec:
        d, spec = spec.split("-", 1)
        days = int(d)
        parts = [int(x) for x in spec.split(":")] + [0, 0]
        return days * 1440 + parts[0] * 60 + parts[1] + parts[2] / 60
    parts = [int(x) for x in spec.split(":")]
    forms = [lambda: parts[0],  # M
             lambda: parts[0] + parts[1] / 60,  # M:S
             lambda: parts[0] * 60 + parts[1] + parts[2] / 60]  # H:M:S
    return forms[len(parts) - 1]()

def controller(first):
    keys = [j["key"] for j in resolve(first)]
    parallel = read(keys[0])["array_parallelism"] or len(keys)
    pending, running, killing = list(keys), {}, {}
    not_before = {}
    while pending or running:
        for key in list(pending):
            if len(running) >= parallel:
                break
            job = read(key)
            if job["cancel_requested"]:
                pending.remove(key)
                update(key, state="CANCELLED", end=time.time())
                continue
            if time.time() < not_before.get(key, 0):
                continue
            pending.remove(key)
            running[key] = launch(key)
        for key, proc in list(running.items()):
            job = read(key)
            if (job["cancel_requested"] or job["requeue_requested"]) and key not in killing and proc.poll() is None \
                    and not requeue_in_flight(job):
                signal_job(job, signal.SIGCONT, full=True)
                signal_job(job, signal.SIGTERM, full=True)
                killing[key] = time.time() + KILL_WAIT_S
            if key in killing and time.time() > killing[key]:
                signal_job(job, signal.SIGKILL, full=True)
            if SECONDS_PER_MINUTE and job.get("time") and proc.poll() is None and job["start"]:
                limit = minutes(job["time"]) * SECONDS_PER_MINUTE
                elapsed = time.time() - job["start"]
                if job.get("signal") and not job.get("warned"):
                    name, _, delay = str(job["signal"]).partition("@")
                    batch_only = name.startswith("B:")
                    if elapsed >= limit - float(delay or 60) * SECONDS_PER_MINUTE / 60:
                        signal_job(job, sig_of(name.split(":")[-1]), batch=batch_only)
                        job = update(key, warned=True)
                if elapsed >= limit and key not in killing:
                    update(key, timed_out=True)
                    signal_job(job, signal.SIGCONT, full=True)
                    signal_job(job, signal.SIGTERM, full=True)
                    killing[key] = time.time() + KILL_WAIT_S
            rc = proc.poll()
            if rc is None:
                continue
            for p in session_members(job["pgid"]):  # the end of a job ends every process it left behind
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            del running[key]
            killing.pop(key, None)
            with _Lock():
                job = read(key)
                job.update(exit_code=rc if rc >= 0 else 128 - rc, end=time.time(), pgid=None)
                if job["cancel_requested"]:
                    job["state"] = "CANCELLED"
                elif job["requeue_requested"]:
                    job.update(state="PENDING", requeue_requested=False, requeue_pid=None, restarts=job["restarts"] + 1,
                               warned=False, timed_out=False)
                    pending.append(key)
                    not_before[key] = time.time() + REQUEUE_DELAY_S
                elif job.get("timed_out"):
                    job["state"] = "TIMEOUT"
                else:
                    job["state"] = "COMPLETED" if rc == 0 else "FAILED"
                write(job)
        time.sleep(POLL_S)


# ---------------------------------------------------------------- srun (inside the batch script)
SRUN_VALUED = {"-o", "--output", "-e", "--error", "-n", "--ntasks", "-N", "--nodes", "-c", "--cpus-per-task",
               "--cpu-bind", "--ntasks-per-node", "-J", "--job-name", "--export", "--mpi", "--gres", "--mem",
               "-m", "--distribution", "--gpus-per-task", "--gpus", "-G", "--open-mode", "--kill-on-bad-exit", "-K"}

def srun(argv):
    opts, i = {}, 0
    while i < len(argv) and argv[i].startswith("-"):
        t = argv[i]
        if "=" in t:
            k, v = t.split("=", 1)
        elif t in SRUN_VALUED:
            k, v = t, argv[i + 1]
            i += 1
        else:
            k, v = t, True
        opts[k] = v
        i += 1
    cmd = argv[i:]
    key = os.environ.get("FAKE_SLURM_KEY")
    job = read(key)
    if job is not None:
        update(key, srun_pids=job.get("srun_pids", []) + [os.getpid()])
    for s in (signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, signal.SIG_IGN)  # the tasks get these directly, srun must not die of them
    ntasks = int(opts.get("-n", opts.get("--ntasks", os.environ.get("SLURM_NTASKS", "1"))))
    per_node = max(1, ntasks // int(os.environ.get("SLURM_JOB_NUM_NODES", "1")))
    procs = []
    for t in range(ntasks):
        env = dict(os.environ, SLURM_PROCID=str(t), SLURM_LOCALID=str(t % per_node), SLURM_NODEID=str(t // per_node),
                   SLURM_STEP_ID="0", SLURM_STEPID="0", SLURM_STEP_NUM_TASKS=str(ntasks))
        def f(opt_short, opt_long):
            pat = opts.get(opt_short, opts.get(opt_long))
            if not pat or job is None:
                return None
            p = Path(expand(pat, job, task=t))
            p.parent.mkdir(parents=True, exist_ok=True)
            return open(p, "ab")
        out, err = f("-o", "--output"), f("-e", "--error")
        for s in (signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(s, signal.SIG_DFL)  # do not hand SIG_IGN down to the task
        stderr = err if err else (subprocess.STDOUT if out else None)
        procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=stderr))
        for s in (signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(s, signal.SIG_IGN)
    def forward(signum, frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [p.wait() for p in procs]
    bad = [c for c in codes if c != 0]
    return (bad[0] if bad[0] > 0 else 128 - bad[0]) if bad else 0


# ---------------------------------------------------------------- sacct / squeue
FIELDS = {"JobID": lambda j: j["key"], "JobIDRaw": lambda j: j["raw_id"], "State": lambda j: j["state"],
          "NodeList": lambda j: j.get("node") or "None assigned", "JobName": lambda j: j["name"],
          "ExitCode": lambda j: f"{j['exit_code'] or 0}:0", "Restarts": lambda j: str(j["restarts"]),
          "Elapsed": lambda j: str(int((j["end"] or time.time()) - j["start"])) if j["start"] else "0"}

def _job_args(argv, flags):
    ids, opts, i = [], {}, 0
    while i < len(argv):
        t = argv[i]
        if t in flags:
            opts[t] = True
        elif t.startswith("--") and "=" in t:
            k, v = t.split("=", 1)
            opts[k] = v
            if k == "--jobs":
                ids += v.split(",")
        elif t.startswith("-"):
            opts[t] = argv[i + 1]
            i += 1
            if t in ("-j", "--jobs"):
                ids += opts[t].split(",")
        else:
            ids.append(t)
        i += 1
    return ids, opts

def sacct(argv):
    ids, opts = _job_args(argv, {"--parsable2", "-P", "-n", "--noheader", "-X", "--allocations", "-D", "--duplicates"})
    cols = (opts.get("-o") or opts.get("--format") or "JobID,JobName,State,ExitCode").split(",")
    jobs = [j for i in dict.fromkeys(ids) for j in resolve(i)] if ids else all_jobs()
    rows, done = [], set()
    for j in jobs:
        if j["key"] in done:
            continue
        if j["task"] is not None and j["state"] == "PENDING" and not j["restarts"]:
            # never-started array tasks are reported as one range line, as Slurm does: 12_[2-4%3]
            group = [k for k in jobs
                     if k["id"] == j["id"] and k["task"] is not None and k["state"] == "PENDING" and not k["restarts"]]
            done.update(k["key"] for k in group)
            lo, hi = group[0]["task"], group[-1]["task"]
            par = f"%{j['array_parallelism']}" if j["array_parallelism"] else ""
            j = dict(j, key=f"{j['id']}_[{lo}-{hi}{par}]" if hi != lo else f"{j['id']}_[{lo}{par}]")
        done.add(j["key"])
        rows.append([FIELDS.get(c, lambda _: "")(j) for c in cols])
        if j["start"] and "-X" not in opts and "--allocations" not in opts:
            rows.append([FIELDS.get(c, lambda _: "")(j) if c != "JobID" else j["key"] + ".batch" for c in cols])
    lines = ([] if ("-n" in opts or "--noheader" in opts) else ["|".join(cols)]) + ["|".join(r) for r in rows]
    print("\n".join(lines))
    return 0

def squeue(argv):
    ids, opts = _job_args(argv, {"-h", "--noheader", "--me", "-a", "--array", "-r"})
    fmt = opts.get("-o") or opts.get("--format") or "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
    short = {"PENDING": "PD", "RUNNING": "R", "REQUEUED": "RQ", "COMPLETING": "CG"}
    jobs = [j for i in ids for j in resolve(i)] if ids else all_jobs()
    val = {"i": lambda j: j["key"], "A": lambda j: j["id"],
           "a": lambda j: str(j["task"] if j["task"] is not None else "N/A"),
           "T": lambda j: j["state"], "t": lambda j: short.get(j["state"], j["state"][:2]), "j": lambda j: j["name"],
           "u": lambda j: os.environ.get("USER", "user"), "P": lambda j: "fake", "M": lambda j: "0:00",
           "D": lambda j: str(j["nodes"]), "R": lambda j: j.get("node") or "(None)", "N": lambda j: j.get("node") or ""}

    def render(j):
        return re.sub(r"%\.?\d*([a-zA-Z])", lambda m: val.get(m.group(1), lambda _: "")(j), fmt)

    head = {"i": "JOBID", "T": "STATE", "t": "ST", "j": "NAME", "A": "ARRAY_JOB_ID", "a": "ARRAY_TASK_ID",
            "u": "USER", "P": "PARTITION", "M": "TIME", "D": "NODES", "R": "NODELIST(REASON)", "N": "NODELIST"}
    if not ("-h" in opts or "--noheader" in opts):
        print(re.sub(r"%\.?\d*([a-zA-Z])", lambda m: head.get(m.group(1), m.group(1)), fmt))
    for j in jobs:
        if j["state"] in ACTIVE:
            print(render(j))
    return 0


# ---------------------------------------------------------------- scancel / scontrol
def scancel(argv):
    ids, opts = _job_args(argv, {"-b", "--batch", "-f", "--full", "-Q", "--quiet"})
    sig = opts.get("--signal") or opts.get("-s")
    rc = 0
    for ident in ids:
        jobs = resolve(ident)
        if not jobs:
            print(f"scancel: error: Invalid job id {ident}", file=sys.stderr)
            rc = 1
        for j in jobs:
            if sig:
                signal_job(j, sig_of(sig), batch="-b" in opts or "--batch" in opts,
                           full="-f" in opts or "--full" in opts)
            elif j["state"] in ACTIVE:
                update(j["key"], cancel_requested=True, **({"state": "CANCELLED"} if j["state"] == "PENDING" else {}))
    return rc

def scontrol(argv):
    if argv[:1] == ["requeue"]:
        for ident in ",".join(argv[1:]).split(","):
            for j in resolve(ident):
                with _Lock():
                    j = read(j["key"])
                    if j["state"] in ("RUNNING", "COMPLETING"):
                        # the state says REQUEUED from now on, so no poll can see this run's end as FAILED
                        # scontrol answers before the job is killed (as slurmctld does): the controller waits for
                        # this process, which may be one of the job's own (submitit's handler), to have exited
                        j.update(state="REQUEUED", requeue_requested=True, requeue_pid=os.getpid(),
                                 requeue_at=time.time())
                    write(j)
                    # (a finished job would need a new controller to be re-run: not emulated here)
        return 0
    if argv[:2] == ["show", "job"]:
        for j in resolve(argv[2]):
            print(f"JobId={j['raw_id']} ArrayJobId={j['id']} ArrayTaskId={j['task']} JobName={j['name']} "
                  f"JobState={j['state']} Restarts={j['restarts']} ExitCode={j['exit_code'] or 0}:0")
        return 0
    print(f"fake scontrol: unsupported {argv}", file=sys.stderr)
    return 1


def install(bindir):
    """Write the six wrapper scripts (sbatch, sacct, squeue, scancel, scontrol, srun) into bindir."""
    bindir = Path(bindir)
    bindir.mkdir(parents=True, exist_ok=True)
    for name in ("sbatch", "sacct", "squeue", "scancel", "scontrol", "srun"):
        w = bindir / name
        w.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} '
                     f'{shlex.quote(os.path.abspath(__file__))} {name} "$@"\n')
        w.chmod(0o755)
    return bindir


if __name__ == "__main__":
    if sys.argv[1:2] == ["install"]:
        print(install(sys.argv[2]))
        sys.exit(0)
    name = Path(sys.argv[1] if sys.argv[1:2] and sys.argv[1] in
                ("sbatch", "sacct", "squeue", "scancel", "scontrol", "srun", "_controller") else sys.argv[0]).name
    args = sys.argv[2:] if name == Path(sys.argv[1]).name else sys.argv[1:]
    if name == "_controller":
        controller(args[0])
        sys.exit(0)
    sys.exit({"sbatch": sbatch, "sacct": sacct, "squeue": squeue, "scancel": scancel, "scontrol": scontrol,
              "srun": srun}[name](args))
