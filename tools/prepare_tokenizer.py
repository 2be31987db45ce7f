"""prepare_tokenizer: the tokenizer tools/prepare.py encodes with (Hugging
Face tokenizers): loaded from a tokenizer.json or a model directory, with
the end-of-text token each document ends with and the BOS it begins with."""
import hashlib
import json
import os

from prepare_inputs import PrepareError, read_json

EOT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>")
TOKENIZER_FILE = "tokenizer.json"  # beside the manifest: the tokenizer the set was made with
TOKENIZER_CONFIG = "tokenizer_config.json"  # and what transformers' AutoTokenizer reads with it


class TokenizerInfo:
    """The loaded tokenizer and what the manifest says of it."""

    def __init__(self, tok, name, path, sha256, files, config):
        self.tok = tok
        self.name = name
        self.path = path
        self.sha256 = sha256
        self.files = files
        self.config = config  # tokenizer_config.json, {} when none
        vocab = tok.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1 if vocab else 0
        self.special = {t.content: i for i, t in sorted(tok.get_added_tokens_decoder().items())
                        if t.special}


def _token_text(v):
    """A tokenizer_config.json token entry: a string or {"content": ...}."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def load_tokenizer(path):
    """A tokenizer.json, or a model directory with one (or GPT-2's vocab.json
    and merges.txt, built as transformers' GPT2TokenizerFast builds them)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    if not os.path.exists(path):
        raise PrepareError(f"{path}: no such tokenizer file or model directory")
    directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    config_path = os.path.join(directory, "tokenizer_config.json")
    config = read_json(config_path) if os.path.isfile(config_path) else {}
    if not isinstance(config, dict):
        raise PrepareError(f"{config_path}: not a JSON object")
    tj = path if os.path.isfile(path) else os.path.join(path, "tokenizer.json")
    vocab, merges = os.path.join(directory, "vocab.json"), os.path.join(directory, "merges.txt")
    if os.path.isfile(tj):
        files = [tj]
        try:
            tok = Tokenizer.from_file(tj)
        except Exception as e:  # the library's own parse error
            raise PrepareError(f"{tj}: not a tokenizers tokenizer.json: {e}") from None
    elif os.path.isfile(vocab) and os.path.isfile(merges):
        files = [vocab, merges]
        try:
            tok = Tokenizer(models.BPE.from_file(vocab, merges))
        except Exception as e:
            raise PrepareError(f"{directory}: vocab.json and merges.txt are not a BPE: {e}") from None
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        eos = _token_text(config.get("eos_token")) or "<|endoftext|>"
        if tok.token_to_id(eos) is not None:
            tok.add_special_tokens([eos])
    else:
        raise PrepareError(f"{path}: a model directory needs tokenizer.json (or GPT-2's vocab.json "
                           "and merges.txt); none is there")
    digest = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            digest.update(fh.read())
    name = config.get("name_or_path") if isinstance(config.get("name_or_path"), str) else ""
    if not name:
        name = os.path.basename(os.path.normpath(directory)) if os.path.basename(tj) == "tokenizer.json" \
            else os.path.splitext(os.path.basename(tj))[0]
    tok.encode_special_tokens = True  # "<|endoftext|>" in a document is text, as tiktoken's encode_ordinary
    return TokenizerInfo(tok, name, os.path.abspath(path), digest.hexdigest(), files, config)


def special_id(info, text, flag):
    tid = info.tok.token_to_id(text)
    if tid is None:
        raise PrepareError(f"{flag} {text}: not a token of the tokenizer {info.path}")
    return tid


def end_of_text(info, given):
    """The token each document ends with: --eot, tokenizer_config.json's
    eos_token, or the first special token with a usual end-of-text name."""
    if given:
        return given, special_id(info, given, "--eot")
    eos = _token_text(info.config.get("eos_token"))
    if eos and info.tok.token_to_id(eos) is not None:
        return eos, info.tok.token_to_id(eos)
    for name in EOT_NAMES:
        if name in info.special:
            return name, info.special[name]
    raise PrepareError(f"{info.path}: no end-of-text token found (no eos_token in "
                       f"tokenizer_config.json, no special token of {', '.join(EOT_NAMES)}): name "
                       "one with --eot TOKEN")


def begin_of_text(info, flag):
    """The BOS each document begins with: the one the tokenizer's own
    post-processor puts before a text (Llama 3's <|begin_of_text|>), or none;
    --bos requires one, --no-bos drops it."""
    tok = info.tok
    bare = tok.encode("a", add_special_tokens=False).ids
    full = tok.encode("a", add_special_tokens=True).ids
    at = next((i for i in range(len(full) - len(bare) + 1) if full[i:i + len(bare)] == bare), 0)
    prefix = full[:at]
    if flag is False:
        return None
    if len(prefix) == 1:
        return tok.id_to_token(prefix[0]), prefix[0]
    bos = _token_text(info.config.get("bos_token"))
    if flag and bos and tok.token_to_id(bos) is not None:
        return bos, tok.token_to_id(bos)
    if flag:
        raise PrepareError(f"--bos: the tokenizer {info.path} adds no BOS token and its "
                           "tokenizer_config.json names none")
    return None


def tokenizer_config_of(info, eot, bos):
    """tokenizer_config.json for transformers' AutoTokenizer: the fast
    tokenizer of tokenizer.json, with the special tokens as the set uses them:
    eos the end-of-text token each document ends with, bos the token each
    begins with (the BOS, or without one the end-of-text token, which is what
    precedes a document in the stream, as GPT-2's config has it). The
    source's model_max_length, unk_token and pad_token are kept where it
    names them; the model directory a run writes sets model_max_length to the
    model's context."""
    config = {"tokenizer_class": "PreTrainedTokenizerFast",
              "bos_token": (bos or eot)[0], "eos_token": eot[0],
              "clean_up_tokenization_spaces": False}
    for key in ("unk_token", "pad_token"):
        text = _token_text(info.config.get(key))
        if text and info.tok.token_to_id(text) is not None:
            config[key] = text
    length = info.config.get("model_max_length")
    if isinstance(length, int) and not isinstance(length, bool) and 0 < length < 1 << 53:
        config["model_max_length"] = length
    return config


def write_tokenizer_files(info, out, eot, bos):
    """DIR/tokenizer.json (the library's own serialization of the tokenizer
    the set is made with, also when it was built from vocab.json and
    merges.txt) and DIR/tokenizer_config.json, each written whole (through a
    .tmp file, renamed). Deterministic: the same tokenizer, the same bytes."""
    for name, text in ((TOKENIZER_FILE, info.tok.to_str(pretty=True)),
                       (TOKENIZER_CONFIG, json.dumps(tokenizer_config_of(info, eot, bos), indent=1))):
        path = os.path.join(out, name)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(path + ".tmp", path)
