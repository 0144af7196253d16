"""A one-call client for the command-harness test: base URL from $MY_LLM, token from the file named
by argv (the {token_file} field), exit 3."""

import json
import os
import sys
import urllib.request

issue_file, token_file = sys.argv[1], sys.argv[2]
token = open(token_file).read()
body = {"model": "m", "messages": [{"role": "user", "content": open(issue_file).read()}]}
req = urllib.request.Request(
    os.environ["MY_LLM"] + "/chat/completions",
    data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer " + token},
)
print(json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"])
sys.exit(3)
