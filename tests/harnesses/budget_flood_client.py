"""A program inside the sandbox that calls the gateway itself, N times, with the session token from
its environment ($OPENAI_BASE_URL, $OPENAI_API_KEY) — not through any harness loop. Every other
call claims another client identity (User-Agent). Prints {"statuses": [...]}; exits 0 if every
call was served, 1 if the first k >= 1 were served and every later one refused with 403 (a spent
budget: what the acceptance test expects), 2 for any other pattern."""

import json
import os
import sys
import urllib.error
import urllib.request

base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
statuses = []
for i in range(int(sys.argv[1])):
    body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": f"call {i}: say something"}]}
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + token}
    if i % 2:
        headers["User-Agent"] = "flood/1.0"
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()
            statuses.append(resp.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        statuses.append(exc.code)
print(json.dumps({"statuses": statuses}), flush=True)
k = statuses.count(200)
if k == len(statuses):
    sys.exit(0)
sys.exit(1 if k >= 1 and statuses == [200] * k + [403] * (len(statuses) - k) else 2)
