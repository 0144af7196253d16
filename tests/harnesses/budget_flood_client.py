"""A program inside the sandbox that calls the gateway itself, N times, with the session token from
its environment ($OPENAI_BASE_URL, $OPENAI_API_KEY) — not through any harness loop. Every other
call claims another client identity (User-Agent). Prints {"statuses": [...]}; exits 0 if every
call was served, 1 if the first k >= 1 were served and every later one refused with 403 (a spent
budget: what the acceptance test expects), 2 for any other pattern. With ``--at-once`` the N calls go
out together, each naming a thread of its own (``x-legorl-thread``: the gateway runs one call of a
thread at a time, calls of different threads at once), to load the engine; exit code 0."""

import json
import os
import sys
import threading
import urllib.error
import urllib.request

base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
statuses = []


def call(i: int, at_once: bool) -> None:
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": f"call {i}: say something"}]}
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + token}
    if at_once:
        headers["x-legorl-thread"] = f"t{i}"
    elif i % 2:
        headers["User-Agent"] = "flood/1.0"
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()
            statuses.append(resp.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        statuses.append(exc.code)


n, at_once = int(sys.argv[1]), "--at-once" in sys.argv[2:]
if at_once:
    threads = [threading.Thread(target=call, args=(i, True)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"statuses": sorted(statuses)}), flush=True)
    sys.exit(0)
for i in range(n):
    call(i, False)
print(json.dumps({"statuses": statuses}), flush=True)
k = statuses.count(200)
if k == len(statuses):
    sys.exit(0)
sys.exit(1 if k >= 1 and statuses == [200] * k + [403] * (len(statuses) - k) else 2)
