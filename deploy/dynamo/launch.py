"""NVIDIA Dynamo 1.6.1's frontend and KV router in front of running `spanc
serve` replicas, on one machine: a spanc_worker.py adapter per replica,
file discovery (DYN_FILE_KV under the work folder), TCP request plane,
ZeroMQ event plane, loopback only. What //test/e2e:dynamo_router_test and
`spanc bench cluster` (bench/cluster/routers.py) start; the README's
"Behind a router" gives the same commands by hand.

Standard library only: it starts Dynamo's processes with `python` (the
Dynamo environment's interpreter, .venv-dynamo) and never imports Dynamo.
"""

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


class Deployment:
    """The frontend on `port` and an adapter per replica, each replica given
    as (its base URL, its --kv-events endpoint). `card` is the model folder
    (model_card.py makes it once, where it is missing); `on_spawn` is told
    of every process started, so that a caller can clean up whatever
    fails."""

    def __init__(self, python, model, replicas, work, port, name,
                 card=None, migration_limit=3, on_spawn=None):
        self.python, self.work, self.port = python, work, port
        self.on_spawn = on_spawn
        self.env = dict(os.environ, DYN_FILE_KV=os.path.join(work, "kv"),
                        HF_HUB_OFFLINE="1", DYN_LOG="warn",
                        # Dynamo keeps model cards under $HOME/.cache (Bazel
                        # sets no HOME): the work folder.
                        HOME=work, DYN_SELF_HOST_METADATA="0")
        self.card = card or os.path.join(work, "card")
        if not os.path.isdir(self.card):
            subprocess.run([python, os.path.join(HERE, "model_card.py"),
                            model, self.card], check=True, timeout=300,
                           stdout=subprocess.DEVNULL)
        self.logs, self.adapters = [], []
        for index, (url, events) in enumerate(replicas):
            self.adapters.append(self.spawn("adapter%d" % index, [
                os.path.join(HERE, "spanc_worker.py"), "--spanc", url,
                "--kv-events", events, "--model-dir", self.card,
                "--served-model-name", name]))
        self.frontend = self.spawn("frontend", [
            "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
            "--http-port", str(port), "--router-mode", "kv",
            "--discovery-backend", "file", "--request-plane", "tcp",
            "--event-plane", "zmq", "--migration-limit",
            str(migration_limit)])

    def spawn(self, name, arguments):
        log = open(os.path.join(self.work, name + ".log"), "w")
        self.logs.append(log.name)
        process = subprocess.Popen([self.python] + arguments, env=self.env,
                                   stdout=log, stderr=subprocess.STDOUT)
        if self.on_spawn is not None:
            self.on_spawn(process)
        return process

    def instances(self):
        """The workers registered (their discovery files)."""
        folder = os.path.join(self.work, "kv", "v1", "instances")
        names = os.listdir(folder) if os.path.isdir(folder) else []
        return [n for n in names if "generate" in n]

    def wait_ready(self, count, timeout=180):
        """Waits until `count` workers are registered and the frontend
        lists the model; raises RuntimeError past `timeout` or when a
        process exits."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(self.instances()) == count:
                try:
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/v1/models" % self.port,
                            timeout=5) as response:
                        if json.loads(response.read())["data"]:
                            return
                except (urllib.error.URLError, OSError, ValueError):
                    pass
            if any(p.poll() is not None for p in self.processes()):
                raise RuntimeError("a Dynamo process exited while starting "
                                   "(logs: %s)" % ", ".join(self.logs))
            time.sleep(0.5)
        raise RuntimeError("Dynamo registered %d of %d workers within %d s" %
                           (len(self.instances()), count, timeout))

    def processes(self):
        return self.adapters + [self.frontend]

    def stop(self):
        for process in self.processes():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
