#!/usr/bin/env python3
"""Writes greedy_smollm2.json: llama.cpp's greedy 32-token continuations.

For each raw-text prompt: token ids from llama-tokenize (as README.md says),
then llama-server's /completion with the prompt given as those ids,
temperature 0, n_predict 32, n_probs 2, cache_prompt false. Each step's
top-2 log-probabilities give the top-2 logit margin (logit1 - logit2 =
logprob1 - logprob2, softmax being shift-invariant).
Usage: make_greedy_reference.py BIN_DIR MODEL OUT.json [PORT]
"""
import json, os, subprocess, sys, tempfile, time, urllib.request

PROMPTS = [
    ("story", "Once upon a time, in a small village at the edge of a forest, there lived"),
    ("fact", "The capital of France is Paris. The capital of Germany is"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("list", "Here are five tips for staying healthy:\n1."),
    ("chatml", "<|im_start|>user\nWhat is the boiling point of water at sea level?<|im_end|>\n<|im_start|>assistant\n"),
    ("math", "Question: If a train travels 60 miles in 1.5 hours, what is its average speed?\nAnswer:"),
    ("french", "La tour Eiffel est un monument situé à"),
    ("json", "{\"name\": \"Alice\", \"age\": 30, \"city\":"),
    ("science", "Photosynthesis is the process by which plants"),
    ("dialogue", "Alice: Did you finish the report?\nBob: Not yet, I"),
]


def tokenize(bin_dir, model, text):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        out = subprocess.run([os.path.join(bin_dir, "llama-tokenize"), "-m",
                              model, "-f", path, "--ids", "--no-escape",
                              "--no-bos", "--log-disable"],
                             check=True, capture_output=True).stdout
        return json.loads(out.decode().strip().splitlines()[-1])
    finally:
        os.unlink(path)


def post(port, path, body):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def main():
    bin_dir, model, out = sys.argv[1:4]
    port = int(sys.argv[4]) if len(sys.argv) > 4 else 8391
    server = subprocess.Popen(
        [os.path.join(bin_dir, "llama-server"), "-m", model, "-c", "2048",
         "-t", "2", "-np", "1", "--host", "127.0.0.1", "--port", str(port),
         "-cram", "0", "--no-webui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health",
                                       timeout=2)
                break
            except Exception:
                time.sleep(0.5)
        cases = []
        for name, text in PROMPTS:
            ids = tokenize(bin_dir, model, text)
            reply = post(port, "/completion", {
                "prompt": ids, "n_predict": 32, "temperature": 0,
                "n_probs": 2, "cache_prompt": False, "return_tokens": True,
                "seed": 0})
            steps = []
            for step in reply["completion_probabilities"]:
                top = step["top_logprobs"]
                steps.append({
                    "ids": [t["id"] for t in top],
                    "logprobs": [t["logprob"] for t in top],
                    "logit_margin": top[0]["logprob"] - top[1]["logprob"]})
            cases.append({
                "name": name, "prompt_text": text, "prompt_ids": ids,
                "continuation_ids": reply["tokens"],
                "continuation_text": reply["content"],
                "stop_type": reply.get("stop_type"),
                "top2": steps})
        props = post(port, "/completion", {"prompt": [1], "n_predict": 0})
        with open(out, "w", encoding="utf-8") as f:
            json.dump({"model": os.path.basename(model),
                       "server_build": props.get("generation_settings", {})
                           .get("model", ""),
                       "n_predict": 32, "cases": cases}, f,
                      ensure_ascii=False, indent=1)
            f.write("\n")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
