"""prepare_inputs: what tools/prepare.py reads: the inputs named (files,
glob patterns, dataset directories) as sources, each cut into tasks (pieces
one worker tokenizes: a whole text file, a byte range of lines, a Parquet
row group, Arrow record batches), and a task's documents."""
import glob
import json
import mmap
import os
import re
import sys

INSTALL_HINT = "bash tools/setup.sh python (a venv in build/python with the pinned tokenizers and pyarrow)"
JSON_LINES = (".jsonl", ".json", ".ndjson")


class PrepareError(Exception):
    """Bad input, a bad flag or an output that cannot be written: the message
    names the file (and the line or row) and the problem."""


def run_tool(command, run, args, errors=(PrepareError,), stopped="stopped"):
    """The main of a tool `fsdpgen COMMAND` runs: run(args), with its own
    errors (`errors`) and an OSError said in one line naming the command
    (exit 1), and Ctrl-C as `stopped` (exit 130)."""
    try:
        return run(args)
    except errors as e:
        print(f"fsdpgen {command}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # an output that cannot be written, an input that cannot be read
        print(f"fsdpgen {command}: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"fsdpgen {command}: {stopped}", file=sys.stderr)
        return 130


def read_json(path):
    """A JSON file's value, or an error naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PrepareError(f"{path}: cannot read it as JSON: {e}") from None


class Source:
    """One input file: its path, its kind (text, jsonl, parquet, arrow) and
    the input it was named by (a file, a pattern, a dataset directory)."""

    def __init__(self, path, kind, given):
        self.path, self.kind, self.given = path, kind, given

    def record(self):
        """What the manifest says of it; a resume compares it."""
        st = os.stat(self.path)
        return {"path": self.path, "format": self.kind, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _kind_of(path):
    low = path.lower()
    if low.endswith(JSON_LINES):
        return "jsonl"
    if low.endswith(".parquet"):
        return "parquet"
    if low.endswith(".arrow"):
        return "arrow"
    return "text"


def _dataset_dir(path, split):
    """The files of a saved Hugging Face dataset or a Hub-layout Parquet directory."""
    dd = os.path.join(path, "dataset_dict.json")
    if os.path.isfile(dd):
        splits = read_json(dd).get("splits", [])
        if split not in splits:
            raise PrepareError(f"{path}: a saved DatasetDict without the split '{split}' "
                               f"(--hf-split); it has {', '.join(map(str, splits)) or 'none'}")
        return _dataset_dir(os.path.join(path, split), split)
    state = os.path.join(path, "state.json")
    if os.path.isfile(state):
        files = read_json(state).get("_data_files")
        if not isinstance(files, list) or not files:
            raise PrepareError(f"{state}: no _data_files: not a saved Hugging Face dataset")
        return [Source(os.path.join(path, f["filename"]), "arrow", path) for f in files]
    parquet = sorted(os.path.relpath(os.path.join(d, f), path)
                     for d, _, fs in os.walk(path) for f in fs if f.endswith(".parquet"))
    if not parquet:
        raise PrepareError(f"{path}: a directory that is neither a saved Hugging Face dataset "
                           "(dataset_dict.json or state.json) nor holds Parquet files")

    def split_of(rel):  # data/train-00000-of-00002.parquet, train/0000.parquet, ...
        parts = rel.split(os.sep)
        return parts[-2] if len(parts) > 1 and parts[-2] != "data" else re.split(r"[-_.]", parts[-1])[0]

    chosen = [r for r in parquet if split_of(r) == split]
    if not chosen:
        found = sorted({split_of(r) for r in parquet})
        raise PrepareError(f"{path}: no Parquet file of the split '{split}' (--hf-split); "
                           f"splits found: {', '.join(found)}")
    return [Source(os.path.join(path, r), "parquet", path) for r in chosen]


def expand_inputs(inputs, split):
    out, seen = [], set()
    for given in inputs:
        if any(c in given for c in "*?["):
            matches = sorted(glob.glob(given))
            if not matches:
                raise PrepareError(f"{given}: no file matches this pattern")
        else:
            matches = [given]
        for m in matches:
            if os.path.isdir(m):
                found = _dataset_dir(m, split)
            elif os.path.isfile(m):
                found = [Source(m, _kind_of(m), given)]
            else:
                raise PrepareError(f"{m}: no such file or directory")
            for s in found:
                real = os.path.realpath(s.path)
                if real in seen:
                    raise PrepareError(f"{s.path}: named twice (by {given}); each input is read once")
                seen.add(real)
                out.append(s)
    return out


def _line_pieces(path, chunk_bytes, separator):
    """Byte ranges of about chunk_bytes, each ending after a run of newlines
    at least `separator` long (1: a line's end, 2: a blank line), with the
    line each starts on."""
    size = os.path.getsize(path)
    if size == 0:
        return []
    pieces, start, line = [], 0, 1
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        while start < size:
            end = start + chunk_bytes
            at = mm.find(b"\n" * separator, end - separator + 1) if end < size else -1
            if at < 0:
                end = size
            else:
                end = at + separator
                while end < size and mm[end] == 10:
                    end += 1
            pieces.append((start, end, line))
            line += mm[start:end].count(b"\n")
            start = end
    return pieces


def make_tasks(sources, args):
    """Every piece of work in input order, (source, first, end, first line or
    row): a whole text file, a byte range of lines, a Parquet row group, a
    range of Arrow record batches; and each one's share of the input's bytes
    (what the progress line counts)."""
    if any(s.kind in ("parquet", "arrow") for s in sources):
        pa, pq = _pyarrow(sources)
    tasks, weights = [], []
    for i, s in enumerate(sources):
        size = os.path.getsize(s.path)
        if s.kind == "text" and args.text_docs == "file":
            tasks.append((i, 0, size, 1))
            weights.append(size)
        elif s.kind in ("text", "jsonl"):
            sep = 2 if s.kind == "text" and args.text_docs == "paragraph" else 1
            for a, b, line in _line_pieces(s.path, args.chunk_bytes, sep):
                tasks.append((i, a, b, line))
                weights.append(b - a)
        elif s.kind == "parquet":
            try:
                meta = pq.ParquetFile(s.path).metadata
            except Exception as e:
                raise PrepareError(f"{s.path}: not a Parquet file: {e}") from None
            row = 0
            for g in range(meta.num_row_groups):
                tasks.append((i, g, g + 1, row))
                weights.append(size * meta.row_group(g).num_rows // max(meta.num_rows, 1))
                row += meta.row_group(g).num_rows
        else:
            batches = _arrow_batches(pa, s.path)
            first, first_row, row, nbytes = 0, 0, 0, 0
            for b, batch in enumerate(batches):
                nbytes += batch.nbytes
                row += batch.num_rows
                if nbytes >= args.chunk_bytes or b == len(batches) - 1:
                    tasks.append((i, first, b + 1, first_row))
                    weights.append(nbytes)
                    first, first_row, nbytes = b + 1, row, 0
    return tasks, weights


def _pyarrow(sources):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        s = next(s for s in sources if s.kind in ("parquet", "arrow"))
        raise PrepareError(f"{s.path}: reading {s.kind} needs pyarrow, which this python "
                           f"({sys.executable}) lacks; install it with {INSTALL_HINT}") from None
    return pa, pq


def _arrow_batches(pa, path):
    """An Arrow file's record batches: the stream format save_to_disk writes,
    or the random-access file format."""
    try:
        source = pa.memory_map(path)
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            reader = pa.ipc.open_file(source)
            return [reader.get_batch(i) for i in range(reader.num_record_batches)]
        return list(reader)
    except (pa.ArrowInvalid, OSError) as e:
        raise PrepareError(f"{path}: not an Arrow file: {e}") from None


def documents(s, task, field, text_docs):
    """Task `task` of source s: its documents in order, as (text, where)
    pairs; "" is an empty document. `field`: of JSON lines, Parquet and
    Arrow; text_docs: file, paragraph or line."""
    _, a, b, first = task
    if s.kind in ("text", "jsonl"):
        with open(s.path, "rb") as f:
            f.seek(a)
            raw = f.read(b - a)
        if s.kind == "text":
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise PrepareError(f"{s.path}: byte offset {a + e.start} is not UTF-8 text "
                                   "(a text input is read as UTF-8)") from None
            if text_docs == "file":
                return [(text, s.path)]
            sep = r"\n\n+" if text_docs == "paragraph" else r"\n"
            return [(d, s.path) for d in re.split(sep, text) if d]
        docs = []
        for n, line in enumerate(raw.split(b"\n")):
            if not line.strip():
                continue
            where = f"{s.path}:{first + n}"
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise PrepareError(f"{where}: not a JSON object ({e}); a {os.path.splitext(s.path)[1]} "
                                   "input is JSON lines, one object a line") from None
            if not isinstance(obj, dict):
                raise PrepareError(f"{where}: a JSON {type(obj).__name__}, not an object")
            if field not in obj:
                raise PrepareError(f"{where}: no field '{field}' (--field); its fields: "
                                   f"{', '.join(sorted(obj)) or 'none'}")
            v = obj[field]
            if not isinstance(v, str):
                raise PrepareError(f"{where}: field '{field}' is {json.dumps(v)[:40]}, not a string")
            docs.append((v, where))
        return docs
    pa, pq = _pyarrow([s])
    if s.kind == "parquet":
        pf = pq.ParquetFile(s.path)
        names = pf.schema_arrow.names
        if field not in names:
            raise PrepareError(f"{s.path}: no column '{field}' (--field); its columns: {', '.join(names)}")
        column = pf.read_row_group(a, columns=[field]).column(0)
    else:
        batches = _arrow_batches(pa, s.path)[a:b]
        names = batches[0].schema.names if batches else []
        if batches and field not in names:
            raise PrepareError(f"{s.path}: no column '{field}' (--field); its columns: {', '.join(names)}")
        column = pa.chunked_array([x.column(field) for x in batches]) if batches else pa.chunked_array([], pa.string())
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise PrepareError(f"{s.path}: column '{field}' holds {column.type}, not strings")
    values = column.to_pylist()
    for n, v in enumerate(values):
        if v is None:
            raise PrepareError(f"{s.path} row {first + n}: column '{field}' is null")
    return [(v, f"{s.path} row {first + n}") for n, v in enumerate(values)]
