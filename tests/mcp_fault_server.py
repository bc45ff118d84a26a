"""An MCP server (stdio, newline-delimited JSON-RPC, no SDK) that misbehaves on request, for the
tests of Hearth's MCP client: `echo` and `clock` answer, `fail` returns a tool error, `hang` never answers,
`crash` exits mid-call, `grow` adds a tool and says the list changed, and `bad_schema` has an
input schema that describes no object; `whoami`, only when named, answers with the request's
`_meta`. Usage: mcp_fault_server.py [TOOL …] (only those tools listed; default all but
`whoami`)"""

import json
import sys

TOOLS = [
    {"name": "echo", "description": "Says the text back", "inputSchema": {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "clock", "description": "The time", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "fail", "description": "Always fails", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "hang", "description": "Never answers", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "crash", "description": "Exits mid-call", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "grow", "description": "Adds the tool `late`", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "bad_schema", "description": "Takes a string, not an object", "inputSchema": {"type": "string"}},
]


WHOAMI = {"name": "whoami", "description": "Says the call's _meta", "inputSchema": {"type": "object", "properties": {}}}

if len(sys.argv) > 1:
    TOOLS = [t for t in TOOLS + [WHOAMI] if t["name"] in sys.argv[1:]]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(t, error=False):
    return {"content": [{"type": "text", "text": t}], "isError": error}


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, id_ = msg.get("method"), msg.get("id")
    if id_ is None:
        continue  # a notification
    if method == "initialize":
        version = msg.get("params", {}).get("protocolVersion", "2025-06-18")
        result = {"protocolVersion": version, "capabilities": {"tools": {"listChanged": True}},
                  "serverInfo": {"name": "fault", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "ping":
        result = {}
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments") or {}
        if name == "echo":
            result = text(args.get("text", ""))
        elif name == "clock":
            result = text("12:00")
        elif name == "fail":
            result = text("boom", error=True)
        elif name == "hang":
            continue  # never answered; later requests still are
        elif name == "crash":
            sys.exit(3)
        elif name == "grow":
            TOOLS.append({"name": "late", "description": "Added later",
                          "inputSchema": {"type": "object", "properties": {}}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            result = text("grown")
        elif name == "late":
            result = text("late answer")
        elif name == "whoami":
            result = text(json.dumps(msg["params"].get("_meta") or {}, sort_keys=True))
        else:
            send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32602, "message": f"unknown tool {name}"}})
            continue
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": f"no method {method}"}})
        continue
    send({"jsonrpc": "2.0", "id": id_, "result": result})
