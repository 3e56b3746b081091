"""What span_router.py decides with: the replicas (up or down, load,
counters), their KV events in one span_scorer.ClusterIndex, the request
planner, and the choice of a replica for a request. No HTTP serving here
(router_http.py); the replicas are reached over loopback HTTP only for
health checks and their block size.
"""

import collections
import http.client
import itertools
import json
import re
import threading
import time
import urllib.parse

from kv_subscriber import KvEventSubscriber
from request_plan import Planner
from span_scorer import ClusterIndex, best


class RouterError(Exception):
    pass


class Replica:
    def __init__(self, index, url, events, replay):
        self.index, self.url = index, url
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise RouterError("replica URL %r: expected http://HOST:PORT"
                              % url)
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.events, self.replay = events, replay
        self.up = True
        self.health_failures = 0
        self.in_flight = 0         # requests
        self.load = 0              # tokens still to compute, in flight
        self.requests = 0          # sent to it
        self.failed = 0            # failed on it (502)
        self.refused = 0           # connections refused (sent elsewhere)
        self.credited = 0          # tokens credited at decisions
        self.subscriber = None

    def connection(self, timeout):
        return http.client.HTTPConnection(self.host, self.port,
                                          timeout=timeout)


def read_block_size(replica, timeout):
    """The block size the replica's /metrics reports
    (vllm:cache_config_info), or None."""
    connection = replica.connection(timeout)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        connection.close()
    found = re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"',
                      text)
    return int(found.group(1)) if found else None


class Decision:
    """Where one request goes, and what it will cost there."""

    def __init__(self, replica, cost, credit, scores):
        self.replica, self.cost = replica, cost
        self.credit, self.scores = credit, scores


class Router:
    def __init__(self, args):
        self.args = args
        self.replicas = [Replica(i, *spec) for i, spec in
                         enumerate(args.replica)]
        self.lock = threading.Lock()
        self.turn = itertools.count()
        self.recent = collections.deque(maxlen=32)
        self.unplanned = 0
        self.block_size = args.block_size or self._block_size()
        self.index = ClusterIndex(len(self.replicas), self.block_size)
        self.planner = None
        if args.policy in ("span", "prefix"):
            self.planner = Planner(
                self._plan_replica if args.planner == "replica" else None,
                args.spanc if args.model else None, args.model,
                self.block_size, args.plan_arg, args.plan_jobs,
                args.plan_timeout)
        for replica in self.replicas:
            if replica.events:
                replica.subscriber = KvEventSubscriber(
                    replica.events, replica.replay,
                    lambda events, r=replica.index: self._apply(r, events),
                    lambda r=replica.index: self._forget(r))
        self.running = True
        self.health = threading.Thread(target=self._check_health,
                                       daemon=True, name="health")
        self.health.start()

    def _block_size(self):
        deadline = time.monotonic() + self.args.startup_timeout
        while True:
            for replica in self.replicas:
                size = read_block_size(replica, self.args.connect_timeout)
                if size:
                    return size
            if time.monotonic() > deadline:
                raise RouterError(
                    "no replica reported its block size on /metrics within "
                    "%g s (is one running? or pass --block-size)"
                    % self.args.startup_timeout)
            time.sleep(0.5)

    def close(self):
        self.running = False
        for replica in self.replicas:
            if replica.subscriber is not None:
                replica.subscriber.close()

    # --- What the replicas hold and whether they are up ----------------------

    def _apply(self, replica, events):
        with self.lock:
            for event in events:
                if isinstance(event, list) and event:
                    self.index.apply(replica, event)

    def _forget(self, replica):
        with self.lock:
            self.index.clear(replica)

    def mark_down(self, replica, why):
        with self.lock:
            if replica.up:
                # Its blocks stay indexed (a replica that only missed health
                # checks still holds them); a restarted one's event stream
                # starts again from 0, which clears them (_forget).
                replica.up = False
                self.recent.append({"event": "down", "replica": replica.index,
                                    "why": why})

    def _check_health(self):
        while self.running:
            for replica in self.replicas:
                healthy = False
                connection = replica.connection(self.args.connect_timeout)
                try:
                    connection.request("GET", "/health")
                    healthy = connection.getresponse().status == 200
                except OSError:
                    pass
                finally:
                    connection.close()
                if healthy:
                    with self.lock:
                        replica.health_failures = 0
                        if not replica.up:
                            # Back: what it holds now arrives as new events
                            # (a restarted replica's stream starts from 0).
                            replica.up = True
                            self.recent.append({"event": "up",
                                                "replica": replica.index})
                else:
                    with self.lock:
                        replica.health_failures += 1
                        failures = replica.health_failures
                    if failures >= self.args.health_failures:
                        self.mark_down(replica, "%d failed health checks"
                                       % failures)
            time.sleep(self.args.health_interval)

    def _plan_replica(self):
        """(host, port) of the replica to ask for a plan: the replicas up,
        in turn."""
        with self.lock:
            up = [r for r in self.replicas if r.up]
            if not up:
                return None
            replica = up[next(self.turn) % len(up)]
        return replica.host, replica.port

    def any_up(self):
        return any(replica.up for replica in self.replicas)

    # --- Choosing -------------------------------------------------------------

    def plan(self, path, body, authorization=None):
        """(blocks or None, tokens or None): what the request is scored on.
        `authorization` is the client's, for a replica asked for the plan."""
        if self.planner is None:
            return None, None
        if path == "/v1/completions":
            return None, prompt_token_ids(body)
        return self.planner.plan(path, body, authorization), None

    def choose(self, path, blocks, tokens, exclude):
        """A Decision among the replicas up and not in `exclude`, with the
        load it adds taken; None when there is none."""
        policy = self.args.policy
        with self.lock:
            allowed = [r.index for r in self.replicas
                       if r.up and r.index not in exclude]
            if not allowed:
                return None
            loads = [r.load for r in self.replicas]
            reused, prompt = {}, 0
            if blocks is not None:
                reused = self.index.reuse_plan(blocks, policy == "span")
                prompt = sum(t for t, _, _ in blocks)
            elif tokens is not None:
                reused = self.index.reuse(tokens, policy == "span")
                prompt = len(tokens)
            if policy == "round-robin":
                chosen = allowed[next(self.turn) % len(allowed)]
            else:
                if blocks is None and tokens is None and \
                        path != "/v1/models":
                    self.unplanned += policy != "least-loaded"
                chosen = best(reused, loads, self.args.load_weight, allowed)
            replica = self.replicas[chosen]
            credit = min(reused.get(chosen, 0), prompt)
            # The work it takes on: what it does not hold (at least a
            # block, so that unplanned requests count too).
            cost = max(prompt - credit, self.block_size)
            replica.load += cost
            replica.in_flight += 1
            replica.requests += 1
            replica.credited += credit
            scores = {r: reused.get(r, 0) - self.args.load_weight * loads[r]
                      for r in allowed}
            self.recent.append({"path": path, "replica": chosen,
                                "prompt_tokens": prompt,
                                "reused": {str(k): v for k, v in
                                           reused.items()},
                                "scores": {str(k): v for k, v in
                                           scores.items()}})
            return Decision(replica, cost, credit, scores)

    def finished(self, decision, failed=False, refused=False):
        with self.lock:
            replica = decision.replica
            replica.load -= decision.cost
            replica.in_flight -= 1
            if refused:
                replica.requests -= 1
                replica.credited -= decision.credit
                replica.refused += 1
            if failed:
                replica.failed += 1

    # --- What it reports --------------------------------------------------------

    def stats(self):
        with self.lock:
            replicas = []
            for r in self.replicas:
                entry = {"url": r.url, "up": r.up, "in_flight": r.in_flight,
                         "load_tokens": r.load, "requests": r.requests,
                         "failed": r.failed, "refused": r.refused,
                         "credited_tokens": r.credited,
                         "blocks_held": len(self.index.ids[r.index])}
                if r.subscriber is not None:
                    entry["events"] = r.subscriber.stats()
                replicas.append(entry)
            return {"policy": self.args.policy, "block_size": self.block_size,
                    "load_weight": self.args.load_weight,
                    "unplanned": self.unplanned,
                    "planner": self.planner.stats() if self.planner else None,
                    "replicas": replicas, "recent": list(self.recent)}

    def metrics(self):
        """The router's own counters, Prometheus text."""
        stats = self.stats()
        lines = []

        def family(name, kind, help_text, values):
            lines.append("# HELP %s %s" % (name, help_text))
            lines.append("# TYPE %s %s" % (name, kind))
            for index, value in values:
                lines.append('%s{replica="%d"} %s' % (name, index, value))

        rows = list(enumerate(stats["replicas"]))
        family("spanc_router_replica_up", "gauge", "1 while the replica is "
               "up", [(i, int(r["up"])) for i, r in rows])
        family("spanc_router_requests_total", "counter", "requests sent to "
               "the replica", [(i, r["requests"]) for i, r in rows])
        family("spanc_router_failed_total", "counter", "requests that "
               "failed on the replica (502)", [(i, r["failed"]) for i, r in
                                               rows])
        family("spanc_router_in_flight", "gauge", "requests in flight",
               [(i, r["in_flight"]) for i, r in rows])
        family("spanc_router_credited_tokens_total", "counter", "prompt "
               "tokens the scorer credited the replica when it chose it",
               [(i, r["credited_tokens"]) for i, r in rows])
        family("spanc_router_blocks_held", "gauge", "blocks the replica's "
               "KV events say it holds", [(i, r["blocks_held"]) for i, r in
                                          rows])
        return "\n".join(lines) + "\n"


def prompt_token_ids(body):
    """A /v1/completions prompt given as token ids, or None."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    prompt = request.get("prompt") if isinstance(request, dict) else None
    if isinstance(prompt, list) and prompt and all(
            isinstance(t, int) for t in prompt):
        return prompt
    return None
