// token_decoder: a tokenizer.json's vocabulary and decoder, run as the
// tokenizers library runs its decoders' decode_chain over the token strings.
#include "runtime/generate/token_decoder.h"

#include <cctype>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/files/file_io.h"

namespace {

using json = nlohmann::json;

constexpr int64_t kTokenizerMaxBytes = int64_t{1} << 30;

// GPT-2's bytes_to_unicode inverted: the code point that stands for each byte.
std::map<char32_t, uint8_t> byte_of_char() {
  std::map<char32_t, uint8_t> m;
  char32_t extra = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    m[printable ? static_cast<char32_t>(b) : extra++] = static_cast<uint8_t>(b);
  }
  return m;
}

// The code points of valid UTF-8 text (a token of a tokenizer.json).
std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < n && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string utf8_of(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string s;
  for (size_t i = begin; i < end; ++i)
    append_utf8(s, cps[i]);
  return s;
}

// ByteLevel: every token's characters back to the bytes they stand for (a
// token with a character outside the table as its own UTF-8), all of it read
// as one lossy UTF-8 text.
std::vector<std::string> byte_level(const std::vector<std::string>& tokens) {
  static const std::map<char32_t, uint8_t> table = byte_of_char();
  std::string bytes;
  for (const std::string& t : tokens) {
    std::string mapped;
    bool all = true;
    for (char32_t c : code_points(t)) {
      auto it = table.find(c);
      if (it == table.end()) {
        all = false;
        break;
      }
      mapped += static_cast<char>(it->second);
    }
    bytes += all ? mapped : t;
  }
  return {utf8_lossy(bytes)};
}

// ByteFallback: runs of <0xHH> tokens become their bytes when those are
// UTF-8, else one U+FFFD per byte.
std::vector<std::string> byte_fallback(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  std::string run;
  auto flush = [&] {
    if (run.empty()) return;
    if (utf8_lossy(run) == run) {
      out.push_back(run);
    } else {
      for (size_t i = 0; i < run.size(); ++i)
        out.push_back("\xEF\xBF\xBD");
    }
    run.clear();
  };
  for (const std::string& t : tokens) {
    unsigned value = 0;
    if (t.size() == 6 && t.starts_with("<0x") && t.ends_with(">") &&
        std::isxdigit(static_cast<unsigned char>(t[3])) &&
        std::isxdigit(static_cast<unsigned char>(t[4]))) {
      value = static_cast<unsigned>(std::stoul(t.substr(3, 2), nullptr, 16));
      run += static_cast<char>(value);
      continue;
    }
    flush();
    out.push_back(t);
  }
  flush();
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::vector<std::string> run_step(const token_decoder::step& d, std::vector<std::string> tokens) {
  using step = token_decoder::step;
  switch (d.what) {
    case step::byte_level:
      return byte_level(tokens);
    case step::byte_fallback:
      return byte_fallback(tokens);
    case step::fuse: {
      std::string all;
      for (const std::string& t : tokens)
        all += t;
      return {all};
    }
    case step::replace:
      for (std::string& t : tokens)
        t = replace_all(t, d.pattern, d.content);
      return tokens;
    case step::strip: {
      const char32_t c = code_points(d.content).at(0);
      for (std::string& t : tokens) {
        const std::vector<char32_t> cps = code_points(t);
        size_t begin = 0, end = cps.size();
        for (int64_t i = 0; i < d.start && begin < cps.size() && cps[begin] == c; ++i)
          ++begin;
        for (int64_t i = 0; i < d.stop && end > begin && cps[end - 1] == c; ++i)
          --end;
        t = utf8_of(cps, begin, end);
      }
      return tokens;
    }
    case step::metaspace: {
      const char32_t r = code_points(d.content).at(0);
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string t;
        for (char32_t c : code_points(tokens[i])) {
          if (c != r)
            append_utf8(t, c);
          else if (!(i == 0 && d.prepend))
            t += ' ';
        }
        tokens[i] = t;
      }
      return tokens;
    }
  }
  return tokens;
}

// One decoder of the JSON (a Sequence's members flattened into steps).
void read_decoder(const json& d, const std::string& where, std::vector<token_decoder::step>& out) {
  using step = token_decoder::step;
  const std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (const json& inner : d.at("decoders"))
      read_decoder(inner, where, out);
  } else if (type == "ByteLevel") {
    out.push_back({step::byte_level});
  } else if (type == "ByteFallback") {
    out.push_back({step::byte_fallback});
  } else if (type == "Fuse") {
    out.push_back({step::fuse});
  } else if (type == "Replace") {
    const json& p = d.at("pattern");
    if (!p.contains("String"))
      throw std::runtime_error(
          fmt::format("{}: decoder Replace with pattern {} cannot run here (a String pattern can)",
                      where, p.dump()));
    out.push_back({step::replace, p.at("String").get<std::string>(), d.at("content")});
  } else if (type == "Strip") {
    step s{step::strip, "", d.at("content").get<std::string>()};
    s.start = d.at("start").get<int64_t>();
    s.stop = d.at("stop").get<int64_t>();
    if (code_points(s.content).size() != 1)
      throw std::runtime_error(
          fmt::format("{}: decoder Strip's content is not one character", where));
    out.push_back(s);
  } else if (type == "Metaspace") {
    step s{step::metaspace, "", d.value("replacement", std::string("\xE2\x96\x81"))};
    s.prepend = d.value("prepend_scheme", std::string("always")) != "never" &&
                d.value("add_prefix_space", true);
    out.push_back(s);
  } else {
    throw std::runtime_error(fmt::format(
        "{}: decoder type '{}' cannot run here; fsdpgen decodes ByteLevel, Metaspace and "
        "Sequences of Replace (a string), ByteFallback, Fuse and Strip",
        where, type.empty() ? d.dump() : type));
  }
}

}  // namespace

std::string utf8_lossy(std::string_view b) {
  std::string out;
  out.reserve(b.size());
  const size_t n = b.size();
  for (size_t i = 0; i < n;) {
    const auto c = static_cast<unsigned char>(b[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    int need = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c == 0xE0) {
      need = 2, lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      need = 2;
    } else if (c == 0xED) {
      need = 2, hi = 0x9F;
    } else if (c == 0xF0) {
      need = 3, lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3) {
      need = 3;
    } else if (c == 0xF4) {
      need = 3, hi = 0x8F;
    }
    size_t j = i + 1;
    bool whole = need > 0;
    for (int k = 0; k < need; ++k, ++j) {
      const unsigned d = j < n ? static_cast<unsigned char>(b[j]) : 0;
      if (j >= n || d < (k == 0 ? lo : 0x80) || d > (k == 0 ? hi : 0xBF)) {
        whole = false;
        break;
      }
    }
    if (whole)
      out.append(b.substr(i, j - i));
    else
      out += "\xEF\xBF\xBD";
    i = j;
  }
  return out;
}

token_decoder token_decoder::from_json(std::string_view text, const std::string& where) {
  token_decoder t;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON: {}", where, e.what()));
  }
  try {
    if (!j.is_object() || !j.contains("model") || !j["model"].contains("vocab"))
      throw std::runtime_error("no model.vocab: not a tokenizers tokenizer.json");
    std::map<int64_t, std::string> by_id;
    auto add = [&](int64_t id, const std::string& token) {
      if (id < 0 || id >= (int64_t{1} << 31))
        throw std::runtime_error(fmt::format("token '{}' has id {}", token, id));
      by_id[id] = token;  // an added token's content over the model's (the library's order)
    };
    const json& vocab = j["model"]["vocab"];
    if (vocab.is_object()) {
      for (const auto& [token, id] : vocab.items())
        add(id.get<int64_t>(), token);
    } else if (vocab.is_array()) {  // Unigram: [token, score] by id
      for (size_t i = 0; i < vocab.size(); ++i)
        add(static_cast<int64_t>(i), vocab[i].at(0).get<std::string>());
    } else {
      throw std::runtime_error("model.vocab is neither an object nor a list");
    }
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const json& a : j["added_tokens"])
        add(a.at("id").get<int64_t>(), a.at("content").get<std::string>());
    const int64_t size = by_id.empty() ? 0 : by_id.rbegin()->first + 1;
    t.tokens_.resize(static_cast<size_t>(size));
    t.present_.resize(static_cast<size_t>(size));
    for (const auto& [id, token] : by_id) {
      t.tokens_[static_cast<size_t>(id)] = token;
      t.present_[static_cast<size_t>(id)] = true;
    }
    const json& decoder = j.value("decoder", json());
    if (decoder.is_null())
      t.join_with_spaces_ = true;
    else
      read_decoder(decoder, where, t.steps_);
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("{}: {}", where, e.what()));
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    throw std::runtime_error(what.starts_with(where) ? what : fmt::format("{}: {}", where, what));
  }
  return t;
}

token_decoder token_decoder::from_file(const std::string& path) {
  return from_json(file_read_whole(path, kTokenizerMaxBytes), path);
}

token_decoder token_decoder::bytes() {
  token_decoder t;
  t.raw_bytes_ = true;
  for (int b = 0; b < 256; ++b) {
    t.tokens_.emplace_back(1, static_cast<char>(b));
    t.present_.push_back(true);
  }
  return t;
}

int64_t token_decoder::id_of(std::string_view token) const {
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (present_[i] && tokens_[i] == token) return static_cast<int64_t>(i);
  return -1;
}

std::string token_decoder::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids)
    if (id >= 0 && id < vocab() && present_[static_cast<size_t>(id)])
      tokens.push_back(tokens_[static_cast<size_t>(id)]);
  std::string text;
  if (raw_bytes_) {
    for (const std::string& t : tokens)
      text += t;
    return utf8_lossy(text);
  }
  if (join_with_spaces_) {
    for (size_t i = 0; i < tokens.size(); ++i)
      text += (i ? " " : "") + tokens[i];
    return text;
  }
  for (const step& s : steps_)
    tokens = run_step(s, std::move(tokens));
  for (const std::string& t : tokens)
    text += t;
  return utf8_lossy(text);
}
