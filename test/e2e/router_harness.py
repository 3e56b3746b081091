"""What the router end-to-end tests share (dynamo_router.py,
sglang_router.py): the document-heavy chats, a client that never raises,
which replica served a request, and the kill-under-load check.

Standard library only, like serve_harness.py, which it builds on.
"""

import json
import socket
import threading
import time
import urllib.error
import urllib.request

from serve_harness import check, metric

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


def served(replicas):
    """Requests each replica finished so far (None once it is dead)."""
    counts = []
    for replica in replicas:
        if replica.process.poll() is not None:
            counts.append(None)
            continue
        _, values = replica.metrics()
        counts.append(sum(metric(values, "vllm:request_success_total",
                                 finished_reason=reason) or 0
                          for reason in ("stop", "length", "abort")))
    return counts


def system_prompt(body, desk):
    """Gives a document set a system prompt of its own, so that no two
    sets share a prefix (the routers credit prefix chains only)."""
    body["messages"][0]["content"] += " (desk %d)" % desk
    return body


def check_repeats(port, replicas, sets, rounds=3, homes=None):
    """Sends each set's chat through the router `rounds` times, a new
    question each time: every repeat lands where the set's blocks are
    (homes[set], or where its first request went) and reuses them
    (usage.prompt_tokens_details.cached_tokens). Returns the homes."""
    homes = dict(homes or {})
    for round_ in range(rounds):
        for index, documents in sets.items():
            body = system_prompt(chat(documents, QUESTIONS[1 + round_]),
                                 index)
            before = served(replicas)
            status, answer = post(port, body)
            after = served(replicas)
            check(status == 200, "set %d round %d answers 200 (%s)" % (
                index, round_, str(answer)[:200]))
            moved = [i for i in range(len(replicas)) if after[i] != before[i]]
            check(len(moved) == 1, "one replica served set %d round %d "
                  "(%s)" % (index, round_, moved))
            if status != 200 or len(moved) != 1:
                continue
            if index not in homes:
                homes[index] = moved[0]
                continue
            check(moved[0] == homes[index], "set %d round %d lands on "
                  "replica %d, which holds its blocks (went to %d)" % (
                      index, round_, homes[index], moved[0]))
            cached = (answer["usage"].get("prompt_tokens_details") or
                      {}).get("cached_tokens", 0)
            prompt = answer["usage"]["prompt_tokens"]
            # Everything but the question (and the last block) is reused.
            check(cached >= prompt - 32,
                  "set %d round %d: %d of %d prompt tokens cached" % (
                      index, round_, cached, prompt))
    for index, replica in enumerate(replicas):
        _, values = replica.metrics()
        print("replica %d: %s prefix cache hits, %s cached blocks" % (
            index, metric(values, "vllm:prefix_cache_hits_total"),
            metric(values, "spanc:kv_cached_blocks")))
    print("homes of the document sets: %s" % homes)
    return homes


def check_kill(port, replicas, gone=None):
    """SIGKILLs the busier replica under load: nothing but its in-flight
    requests may fail, those fail cleanly, every request sent once the
    router noticed succeeds; `gone()` says the router let go of it.
    Returns the victim's index."""
    results, lock = [], threading.Lock()
    stop = threading.Event()

    def client(number):
        k = 0
        while not stop.is_set():
            documents = [(number + k + j) % len(DOCUMENTS) for j in range(3)]
            started = time.time()
            status, answer = post(port, chat(
                documents, QUESTIONS[(number * 7 + k) % len(QUESTIONS)]),
                timeout=240)
            with lock:
                results.append((started, time.time(), status, answer))
            k += 1
            if status != 200:
                time.sleep(0.2)  # no busy loop on a broken deployment

    before = served(replicas)
    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(3)
    now = served(replicas)
    victim = 0 if now[0] - before[0] >= now[1] - before[1] else 1
    # The kill takes from the signal until the kernel has taken the
    # process down: a request that reached it in between was in flight on
    # it (a connection accepted into the listening socket's backlog is
    # reset then), and one in flight may fail before wait() returns.
    signalled_at = time.time()
    replicas[victim].process.kill()
    replicas[victim].process.wait()
    killed_at = time.time()

    def overlaps(result):
        return result[0] <= killed_at and result[1] >= signalled_at
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
    in_flight = [r for r in results if overlaps(r)]
    check(all(overlaps(r) for r in failures),
          "only requests in flight at the kill failed (%d failed, %d were "
          "in flight; failures started and ended at %s s from the kill)" % (
              len(failures), len(in_flight),
              ["%+.3f..%+.3f" % (r[0] - killed_at, r[1] - killed_at)
               for r in failures]))
    started_after = [r for r in results if r[0] > killed_at + 3]
    check(started_after and all(r[2] == 200 for r in started_after),
          "every request sent after the replica's adapter left succeeds "
          "(%d)" % len(started_after))
    print("kill: %d requests, %d in flight at the kill, %d failed, %d sent "
          "after it" % (len(results), len(in_flight), len(failures),
                        len(started_after)))
    if gone is not None:
        deadline = time.time() + 30
        while time.time() < deadline and not gone():
            time.sleep(0.5)
        check(gone(), "the router let go of the killed replica")
    return victim
