"""An agent's command that calls the gateway itself with the session token from its environment
($OPENAI_BASE_URL, $OPENAI_API_KEY), N calls at once, to load the engine (the harness makes one call at
a time). Each call names a thread of its own (``x-legorl-thread``): the gateway runs one call of a
thread at a time, calls of different threads at once. Prints the HTTP status of each call."""

import json
import os
import sys
import threading
import urllib.error
import urllib.request

base, token = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
statuses: list[int] = []


def call(i: int) -> None:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": f"call {i}"}]}
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + token, "x-legorl-thread": f"t{i}"}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            resp.read()
            statuses.append(resp.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        statuses.append(exc.code)


threads = [threading.Thread(target=call, args=(i,)) for i in range(int(sys.argv[1]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"statuses": sorted(statuses)}), flush=True)
