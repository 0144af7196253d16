"""Driver for the OpenHands SDK, run *inside* the sandbox by the OpenHands venv's Python (3.12).

Standalone on purpose (stdlib + the ``openhands`` packages only; legorl is not importable there).
Builds ``LLM(model="openai/<m>", base_url=<gateway>/v1, api_key=<session token>)``, an ``Agent`` with a
reduced tool set, ``Conversation(...).run()`` with a step budget (``max_iteration_per_run``), then writes
a transcript JSON: {"status", "finished", "steps", "events": [...], "error"}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", default="policy")
    ap.add_argument("--issue-file", required=True)
    ap.add_argument("--workspace", default="/workspace")
    ap.add_argument("--max-steps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--max-input-tokens", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--llm-timeout", type=int, default=1800, help="seconds per model call (slow CPU engines)")
    ap.add_argument("--tools", default="terminal", help="comma list of: terminal, file_editor, task_tracker")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    out: dict = {"status": None, "finished": False, "steps": 0, "events": [], "error": None}
    try:
        from openhands.sdk import LLM, Agent, Conversation, Tool
        from pydantic import SecretStr

        registry = {}
        wanted = [t.strip() for t in args.tools.split(",") if t.strip()]
        if "terminal" in wanted:
            from openhands.tools.terminal import TerminalTool

            registry["terminal"] = Tool(name=TerminalTool.name, params={"terminal_type": "subprocess"})
        if "file_editor" in wanted:
            from openhands.tools.file_editor import FileEditorTool

            registry["file_editor"] = Tool(name=FileEditorTool.name)
        if "task_tracker" in wanted:
            from openhands.tools.task_tracker import TaskTrackerTool

            registry["task_tracker"] = Tool(name=TaskTrackerTool.name)
        unknown = set(wanted) - set(registry)
        if unknown:
            raise SystemExit(f"unknown tools {sorted(unknown)}")
        llm_kwargs = dict(
            model=f"openai/{args.model}",
            base_url=args.base_url,
            api_key=SecretStr(os.environ.get("LEGORL_API_KEY", "none")),
            usage_id="agent",
            num_retries=0,
            temperature=args.temperature,
            max_output_tokens=args.max_tokens,
            caching_prompt=False,
            native_tool_calling=True,
            timeout=args.llm_timeout,
        )
        if args.max_input_tokens:
            llm_kwargs["max_input_tokens"] = args.max_input_tokens
        llm = LLM(**llm_kwargs)
        agent = Agent(llm=llm, tools=[registry[t] for t in wanted])
        issue = open(args.issue_file, encoding="utf-8").read()
        conv = Conversation(
            agent=agent,
            workspace=args.workspace,
            max_iteration_per_run=args.max_steps,
            visualizer=None,
            persistence_dir=None,
        )
        try:
            conv.send_message(issue)
            conv.run()
        finally:
            state = conv.state
            status = getattr(state, "execution_status", None)
            out["status"] = getattr(status, "value", str(status))
            out["finished"] = out["status"] == "finished"
            for ev in list(state.events):
                try:
                    out["events"].append(json.loads(ev.model_dump_json()))
                except Exception:  # a transcript entry is best effort
                    out["events"].append({"kind": type(ev).__name__, "repr": repr(ev)[:2000]})
            out["steps"] = sum(1 for e in out["events"] if e.get("kind") == "ActionEvent")
    except BaseException as exc:  # recorded, then reported by the exit code
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-4000:]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f)
    print(json.dumps({k: out[k] for k in ("status", "finished", "steps", "error")}), flush=True)
    if out["error"]:
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
