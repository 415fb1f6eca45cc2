"""A stand-in for the OpenAI Batch API in tests: answers a batch input file by POSTing each body to a server.

    python tests/batch/batch_file_runner.py REQUESTS.jsonl RESULTS.jsonl --base-url http://127.0.0.1:PORT/v1 \
        [--fail N] [--expire N] [--garble N] [--drop N] [--unusable N]

It reads the requests file as the Batch API does (one ``{custom_id, method, url, body}`` per line), sends each
``body`` to ``base URL + url`` (``/v1`` given once) over HTTP, and writes the results in OpenAI's batch output
format (``{id, custom_id, response: {status_code, request_id, body}, error}``), in an order of its own (the Batch
API does not keep the input order). ``--fail N`` turns the N-th request's result into a server error (HTTP 500),
``--expire N`` into OpenAI's expired line (``response`` null, ``error.code`` ``batch_expired``), ``--garble N``
writes an unreadable line in its place, ``--drop N`` leaves it out and ``--unusable N`` answers it with prose
where JSON was asked for; N counts from 1 in custom_id order.
Only the standard library: it is no part of boe.
"""

from __future__ import annotations

import argparse
import json
import random
import urllib.error
import urllib.request
import uuid

EXPIRED = "This request could not be executed before the completion window expired."
SERVER_ERROR = "The server had an error while processing your request."


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("requests")
    ap.add_argument("results")
    ap.add_argument("--base-url", required=True)
    for name in ("fail", "expire", "garble", "drop", "unusable"):
        ap.add_argument(f"--{name}", type=int, action="append", default=[])
    args = ap.parse_args()
    with open(args.requests, encoding="utf-8") as fh:
        lines = [json.loads(line) for line in fh if line.strip()]
    root = args.base_url.rstrip("/").removesuffix("/v1")
    out = []
    for i, req in enumerate(sorted(lines, key=lambda r: r["custom_id"]), 1):
        assert req["method"] == "POST" and req["url"] == "/v1/chat/completions", req
        cid = req["custom_id"]
        line_id = f"batch_req_{uuid.uuid4().hex}"
        if i in args.drop:
            continue
        if i in args.garble:
            out.append('{"id": "' + line_id + '", "custom_id": ')
            continue
        if i in args.expire:
            error = {"code": "batch_expired", "message": EXPIRED}
            out.append(json.dumps({"id": line_id, "custom_id": cid, "response": None, "error": error}))
            continue
        if i in args.fail:
            body = {"error": {"message": SERVER_ERROR, "type": "server_error", "param": None, "code": None}}
            response = {"status_code": 500, "request_id": f"req_{uuid.uuid4().hex}", "body": body}
            out.append(json.dumps({"id": line_id, "custom_id": cid, "response": response, "error": None}))
            continue
        status, body = post(root + req["url"], req["body"])
        if i in args.unusable:  # a 200 whose every choice is prose, not the JSON asked for
            for choice in body["choices"]:
                choice["message"]["content"] = "I am not able to answer that."
        response = {"status_code": status, "request_id": f"req_{uuid.uuid4().hex}", "body": body}
        out.append(json.dumps({"id": line_id, "custom_id": cid, "response": response, "error": None}))
    random.Random(len(out)).shuffle(out)
    with open(args.results, "w", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in out))


if __name__ == "__main__":
    main()
