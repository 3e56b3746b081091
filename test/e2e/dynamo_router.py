"""Two `spanc serve` replicas behind NVIDIA Dynamo's frontend and KV router
(issue 27, deploy/dynamo/), on loopback with file discovery.

Each replica publishes --kv-events; its adapter (deploy/dynamo/
spanc_worker.py) registers it and points Dynamo's subscriber at them. The
test checks that a repeated document-heavy chat lands on the replica that
holds its blocks (the replica whose counters move, usage.prompt_tokens_
details.cached_tokens covering the documents, and that replica's
vllm:prefix_cache_hits_total), for several document sets spread over both
replicas; then that killing one replica mid-load loses no request that was
not in flight on it: every request ends (none hangs), each failure is a
clean JSON error, at most the requests in flight on the killed replica
fail, and every request after its adapter left is answered by the other.

Run under the Dynamo environment (tools/setup.sh --with-dynamo):
    dynamo_router.py SPANC MODEL.gguf
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_harness  # noqa: E402
from serve_harness import Server, check, metric, run  # noqa: E402

NAME = "smollm2"
DOCUMENTS = [
    "Kitchen rules: the dishwasher runs every evening at six o'clock, the "
    "fridge is cleared on Fridays, and mugs go back to the shelf by the "
    "window before the team meeting on Monday mornings.",
    "Parking: the garage opens at seven, visitors park on level two, bikes "
    "are locked in the yard behind the main entrance, and the electric "
    "chargers are kept free for cars that are charging.",
    "Security: badges are worn at all times, doors to the server room stay "
    "closed, the alarm code changes every quarter and guests sign in at "
    "the front desk, where they are met by their host.",
    "Holidays: requests go to the team lead two weeks ahead, the office "
    "closes between Christmas and New Year, and unused days carry over to "
    "the first quarter of the following year only.",
    "Printing: the printer on the second floor prints in colour, the one "
    "by the kitchen only in black, toner is in the cupboard by the lift, "
    "and paper jams are reported to the front desk.",
    "Meetings: rooms are booked in the calendar, a booking not used for "
    "ten minutes is released, the large room seats twenty, and the video "
    "equipment is switched off after every meeting.",
]
QUESTIONS = ["When does the dishwasher run?", "Where do visitors park?",
             "Who meets the guests?", "When does the office close?",
             "Where is the toner?", "How many seats has the large room?"]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def chat(documents, question):
    messages = [{"role": "system",
                 "content": "Answer in one short sentence from the documents."}]
    messages += [{"role": "user", "content": DOCUMENTS[d]} for d in documents]
    messages.append({"role": "user", "content": question})
    return {"model": NAME, "messages": messages, "max_tokens": 6,
            "temperature": 0}


def post(port, body, timeout=180):
    """(status, JSON answer); a connection failure is status 0."""
    request = urllib.request.Request(
        "http://127.0.0.1:%d/v1/chat/completions" % port,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        data = error.read()
        try:
            return error.code, json.loads(data)
        except ValueError:
            return error.code, {"unparsed": data.decode("utf-8", "replace")}
    except (urllib.error.URLError, OSError) as error:
        return 0, {"error": str(error)}


class Deployment:
    """The frontend, two replicas and their adapters."""

    def __init__(self, spanc, model, work):
        self.work = work
        self.python = sys.executable
        self.env = dict(os.environ, DYN_FILE_KV=os.path.join(work, "kv"),
                        HF_HUB_OFFLINE="1", DYN_LOG="warn",
                        # Dynamo keeps model cards under $HOME/.cache (Bazel
                        # sets no HOME): the test's own folder.
                        HOME=work,
                        DYN_SELF_HOST_METADATA="0")
        self.card = os.path.join(work, "card")
        subprocess.run([self.python, os.path.join(DEPLOY, "model_card.py"),
                        model, self.card], check=True, timeout=120)
        self.replicas, self.adapters, self.logs = [], [], []
        for index in range(2):
            replica = Server(spanc, model, "--kv-events", "tcp://127.0.0.1:0",
                             "--served-model-name", NAME,
                             "--max-tokens-limit", "64")
            events = [line.split("KV events on ")[1].strip()
                      for line in replica.stderr if "KV events on" in line]
            check(events, "replica %d prints its KV event address" % index)
            self.replicas.append(replica)
            self.adapters.append(self.start_adapter(index, events[0]))
        self.port = free_port()
        self.frontend = self.spawn("frontend", [
            "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
            "--http-port", str(self.port), "--router-mode", "kv",
            "--discovery-backend", "file", "--request-plane", "tcp",
            "--event-plane", "zmq", "--migration-limit", "3"])
        self.wait_ready(2)

    def spawn(self, name, arguments):
        log = open(os.path.join(self.work, name + ".log"), "w")
        self.logs.append(log.name)
        return subprocess.Popen([self.python] + arguments, env=self.env,
                                stdout=log, stderr=subprocess.STDOUT)

    def start_adapter(self, index, events):
        return self.spawn("adapter%d" % index, [
            os.path.join(DEPLOY, "spanc_worker.py"),
            "--spanc", "http://127.0.0.1:%d" % self.replicas[index].port,
            "--kv-events", events, "--model-dir", self.card,
            "--served-model-name", NAME])

    def instances(self):
        folder = os.path.join(self.work, "kv", "v1", "instances")
        names = os.listdir(folder) if os.path.isdir(folder) else []
        return [n for n in names if "generate" in n]

    def wait_ready(self, count, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(self.instances()) == count:
                try:
                    with urllib.request.urlopen(
                            "http://127.0.0.1:%d/v1/models" % self.port,
                            timeout=5) as response:
                        if json.loads(response.read())["data"]:
                            return True
                except (urllib.error.URLError, OSError, ValueError):
                    pass
            dead = [p for p in [self.frontend] + self.adapters
                    if p.poll() is not None]
            if dead:
                check(False, "a Dynamo process exited while starting")
                return False
            time.sleep(0.5)
        check(False, "Dynamo registered %d workers within %ds (%d)" % (
            count, timeout, len(self.instances())))
        return False

    def served(self):
        """Requests each replica finished so far."""
        counts = []
        for replica in self.replicas:
            if replica.process.poll() is not None:
                counts.append(None)
                continue
            _, values = replica.metrics()
            counts.append(sum(metric(values, "vllm:request_success_total",
                                     finished_reason=reason) or 0
                              for reason in ("stop", "length", "abort")))
        return counts

    def stop(self):
        for process in self.adapters + [self.frontend]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.adapters + [self.frontend]:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def tail(self):
        for name in self.logs:
            with open(name) as log:
                lines = [line for line in log if "http-request" not in line]
            sys.stdout.write("--- %s\n%s" % (name, "".join(lines[:25] +
                                                            lines[-8:])))


def direct(replica, body):
    """Sends `body` to one replica itself, past Dynamo."""
    status, _, answer = replica.json("POST", "/v1/chat/completions", body,
                                     timeout=180)
    check(status == 200, "a direct request answers 200")
    return answer


def check_routing(deployment):
    """Document sets warmed on each replica directly (Dynamo routed none
    of them: it knows them from the KV events alone) are then sent through
    the frontend, repeatedly: each lands on the replica holding it."""
    sets = {0: [0, 1, 2], 1: [3, 4, 5]}
    for index, documents in sets.items():
        # A system prompt of each set's own, so neither shares a prefix
        # with the other (the routers credit prefix chains only).
        body = chat(documents, QUESTIONS[0])
        body["messages"][0]["content"] += " (desk %d)" % index
        direct(deployment.replicas[index], body)
    time.sleep(1)  # the events reach the router
    for round_ in range(3):
        for index, documents in sets.items():
            body = chat(documents, QUESTIONS[1 + round_])
            body["messages"][0]["content"] += " (desk %d)" % index
            before = deployment.served()
            status, answer = post(deployment.port, body)
            after = deployment.served()
            check(status == 200, "set %d round %d answers 200 (%s)" % (
                index, round_, str(answer)[:200]))
            moved = [i for i in range(2) if after[i] != before[i]]
            check(moved == [index], "set %d round %d lands on replica %d, "
                  "which holds its blocks (moved: %s)" % (
                      index, round_, index, moved))
            if status != 200:
                continue
            cached = (answer["usage"].get("prompt_tokens_details") or
                      {}).get("cached_tokens", 0)
            prompt = answer["usage"]["prompt_tokens"]
            # Everything but the question (and the last block) is reused.
            check(cached >= prompt - 32,
                  "set %d round %d: %d of %d prompt tokens cached" % (
                      index, round_, cached, prompt))
    for index, replica in enumerate(deployment.replicas):
        _, values = replica.metrics()
        hits = metric(values, "vllm:prefix_cache_hits_total")
        print("replica %d: %s prefix cache hits, %s cached blocks" % (
            index, hits, metric(values, "spanc:kv_cached_blocks")))
        check(hits and hits > 0, "replica %d hit its cache" % index)


def check_kill(deployment):
    """SIGKILL the busier replica under load; nothing but its in-flight
    requests may fail, and those fail cleanly."""
    results, lock = [], threading.Lock()
    stop = threading.Event()

    def client(number):
        k = 0
        while not stop.is_set():
            documents = [(number + k + j) % len(DOCUMENTS) for j in range(3)]
            started = time.time()
            status, answer = post(deployment.port, chat(
                documents, QUESTIONS[(number * 7 + k) % len(QUESTIONS)]),
                timeout=240)
            with lock:
                results.append((started, time.time(), status, answer))
            k += 1
            if status != 200:
                time.sleep(0.2)  # no busy loop on a broken deployment

    before = deployment.served()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(3)
    now = deployment.served()
    victim = 0 if now[0] - before[0] >= now[1] - before[1] else 1
    deployment.replicas[victim].process.kill()
    killed_at = time.time()
    print("killed replica %d (served %s during the load so far)" % (
        victim, [a - b for a, b in zip(now, before)]))
    time.sleep(8)
    stop.set()
    for thread in threads:
        thread.join(300)
        check(not thread.is_alive(), "every client finished (none hangs)")
    failures = [r for r in results if r[2] != 200]
    for _, _, status, answer in failures:
        check(status >= 400 and isinstance(answer, dict) and
              ("message" in answer or "error" in answer),
              "a failed request gets a clean JSON error (%d %s)" % (
                  status, str(answer)[:200]))
    in_flight = [r for r in results if r[0] <= killed_at <= r[1]]
    check(all(r[0] <= killed_at <= r[1] for r in failures),
          "only requests in flight at the kill failed (%d failed, %d were "
          "in flight)" % (len(failures), len(in_flight)))
    started_after = [r for r in results if r[0] > killed_at + 3]
    check(started_after and all(r[2] == 200 for r in started_after),
          "every request sent after the replica's adapter left succeeds "
          "(%d)" % len(started_after))
    print("kill: %d requests, %d in flight at the kill, %d failed, %d sent "
          "after it" % (len(results), len(in_flight), len(failures),
                        len(started_after)))
    deadline = time.time() + 30
    while time.time() < deadline and len(deployment.instances()) != 1:
        time.sleep(0.5)
    check(len(deployment.instances()) == 1,
          "the killed replica's worker left Dynamo's discovery")


DEPLOY = None


def main(spanc, model):
    global DEPLOY
    # Bazel's runfiles hold deploy/dynamo; by hand, the clone does.
    DEPLOY = os.path.abspath("deploy/dynamo")
    if not os.path.isdir(DEPLOY):
        DEPLOY = os.path.join(HERE, "..", "..", "deploy", "dynamo")
    with tempfile.TemporaryDirectory(prefix="spanc-dynamo-") as work:
        deployment = Deployment(spanc, model, work)
        try:
            check_routing(deployment)
            check_kill(deployment)
        finally:
            if serve_harness.failures:
                deployment.tail()
            deployment.stop()


if __name__ == "__main__":
    sys.exit(run(main))
