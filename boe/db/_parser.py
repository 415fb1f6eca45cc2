"""The import's helper process: parse ledger lines and stream prepared questions to the writer.

Run as ``python -m boe.db._parser``; it reads ``(paths, skip)`` pickled on
standard input and writes pickled lists of items (see
`boe.db.interchange.parse_files`) to standard output, then ``None``. It stops
quietly when the writer goes away (a closed pipe).
"""

from __future__ import annotations

import pickle
import sys
import traceback

SEND_EVERY = 32  # items per message


def main() -> None:
    """Entry point of the helper process."""
    from boe.db.interchange import parse_files

    out = sys.stdout.buffer
    paths, skip = pickle.load(sys.stdin.buffer)
    buf: list[object] = []
    try:
        for item in parse_files(paths, skip):
            buf.append(item)
            if len(buf) >= SEND_EVERY:
                pickle.dump(buf, out, protocol=pickle.HIGHEST_PROTOCOL)
                buf = []
        pickle.dump(buf, out, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.dump(None, out)
        out.flush()
    except (BrokenPipeError, ConnectionResetError):
        return
    except BaseException:
        try:
            pickle.dump(("fail", traceback.format_exc()), out)
            out.flush()
        except OSError:
            pass


if __name__ == "__main__":
    main()
