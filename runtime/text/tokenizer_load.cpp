#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>
#include <functional>

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_impl.h"
#include "runtime/text_file.h"

// Tokenizer::load: tokenizer.json (the supported byte-level BPE pipelines) and
// tokenizer_config.json (BOS / EOS, add_bos_token) into a Tokenizer::Impl.
namespace strata {
namespace json = boost::json;

namespace {

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2's pattern: Llama-3's with single digits.
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string str_of(const json::value* v) {
  if (!v) return "";
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_object()) {  // {"content": "...", ...} (AddedToken form in older configs)
    if (const auto* c = v->as_object().if_contains("content"); c && c->is_string())
      return std::string(c->as_string());
  }
  return "";
}

json::value parse_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) throw ModelError(path + ": invalid JSON: " + ec.message());
  if (!v.is_object()) throw ModelError(path + ": expected a JSON object at the top level");
  return v;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& tokenizer_json_path,
                                           const std::string& tokenizer_config_json_path) {
  auto im = std::make_unique<Impl>();
  im->path = tokenizer_json_path;
  const std::string& P = tokenizer_json_path;
  const json::value root = parse_json_file(P);
  const auto& top = root.as_object();
  auto fail = [&](const std::string& what) { throw ModelError(P + ": " + what); };
  const auto type_of = [](const json::value* v) -> std::string {
    if (!v || !v->is_object()) return "";
    const auto* t = v->as_object().if_contains("type");
    return t && t->is_string() ? std::string(t->as_string()) : "";
  };

  // Pipeline: no normalizer, Split(Llama-3 or Qwen2 regex) + ByteLevel, BPE, ByteLevel decoder.
  if (const auto* nz = top.if_contains("normalizer"); nz && !nz->is_null())
    fail("normalizer '" + type_of(nz) +
         "' is not supported (byte-level BPE without normalizer only)");
  const auto* pre = top.if_contains("pre_tokenizer");
  bool regex_ok = false, byte_level_ok = false;
  if (type_of(pre) == "Sequence") {
    const auto* list = pre->as_object().if_contains("pretokenizers");
    if (list && list->is_array()) {
      for (const auto& p : list->as_array()) {
        const std::string t = type_of(&p);
        if (t == "Split") {
          const auto* pat = p.as_object().if_contains("pattern");
          const auto* rx =
              pat && pat->is_object() ? pat->as_object().if_contains("Regex") : nullptr;
          const std::string r = rx && rx->is_string() ? std::string(rx->as_string()) : "";
          const auto* beh = p.as_object().if_contains("behavior");
          const auto* inv = p.as_object().if_contains("invert");
          if (!beh || !beh->is_string() || beh->as_string() != "Isolated" ||
              (inv && inv->is_bool() && inv->as_bool()))
            fail("pre_tokenizer Split must be behavior Isolated, invert false");
          if (r == kLlama3Regex)
            im->max_digits = 3;
          else if (r == kQwen2Regex)
            im->max_digits = 1;
          else
            fail("pre_tokenizer Split regex is not the Llama-3 or Qwen2 pattern: " + r);
          regex_ok = true;
        } else if (t == "ByteLevel") {
          const auto* ur = p.as_object().if_contains("use_regex");
          const auto* aps = p.as_object().if_contains("add_prefix_space");
          if ((ur && ur->is_bool() && ur->as_bool()) || (aps && aps->is_bool() && aps->as_bool()))
            fail("pre_tokenizer ByteLevel must have use_regex false and add_prefix_space false");
          byte_level_ok = regex_ok;  // must come after the Split
        } else {
          fail("pre_tokenizer '" + t + "' is not supported");
        }
      }
    }
  }
  if (!regex_ok || !byte_level_ok)
    fail("unsupported pre_tokenizer: expected Sequence[Split(Llama-3/Qwen2 regex), ByteLevel]");
  if (const auto* dec = top.if_contains("decoder");
      dec && !dec->is_null() && type_of(dec) != "ByteLevel")
    fail("decoder '" + type_of(dec) + "' is not supported (ByteLevel only)");

  const auto* model = top.if_contains("model");
  if (!model || !model->is_object()) fail("missing \"model\"");
  const auto& mo = model->as_object();
  if (const auto t = type_of(model); !t.empty() && t != "BPE")
    fail("model type '" + t + "' is not BPE");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const auto* v = mo.if_contains(k); v && !v->is_null())
      fail(std::string("model.") + k + " is not supported");
  if (const auto* im_ = mo.if_contains("ignore_merges"); im_ && im_->is_bool())
    im->ignore_merges = im_->as_bool();
  const auto* vocab = mo.if_contains("vocab");
  const auto* merges = mo.if_contains("merges");
  if (!vocab || !vocab->is_object()) fail("model.vocab missing or not an object");
  if (!merges || !merges->is_array()) fail("model.merges missing or not an array");

  const auto& bl = tok::byte_level();
  im->vocab.reserve(vocab->as_object().size());
  for (const auto& kv : vocab->as_object()) {
    if (!kv.value().is_int64())
      fail("model.vocab['" + std::string(kv.key()) + "'] is not an integer id");
    const auto bytes = bl.to_bytes(kv.key());
    if (!bytes)
      fail("vocab entry '" + std::string(kv.key()) + "' is not byte-level (not a byte-level BPE)");
    const auto id = static_cast<std::int32_t>(kv.value().as_int64());
    if (!im->vocab.insert(*bytes, id))
      fail("duplicate vocab entry '" + std::string(kv.key()) + "'");
    im->set_token(id, *bytes, false);
  }
  for (int b = 0; b < 256; ++b) {
    const auto id = im->vocab.find(std::string(1, static_cast<char>(b)));
    if (id < 0)
      fail("vocab has no token for byte " + std::to_string(b) + " (not a byte-level BPE)");
    im->byte_id[static_cast<std::size_t>(b)] = id;
  }
  const auto& ma = merges->as_array();
  im->merges.reserve(ma.size());
  for (std::size_t r = 0; r < ma.size(); ++r) {
    std::string_view a, b;
    if (ma[r].is_string()) {  // "a b"
      const std::string_view s = ma[r].as_string();
      const auto sp = s.find(' ');
      if (sp == std::string_view::npos)
        fail("merge " + std::to_string(r) + " '" + std::string(s) + "' has no space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (ma[r].is_array() && ma[r].as_array().size() == 2 &&
               ma[r].as_array()[0].is_string() && ma[r].as_array()[1].is_string()) {  // ["a", "b"]
      a = ma[r].as_array()[0].as_string(), b = ma[r].as_array()[1].as_string();
    } else {
      fail("merge " + std::to_string(r) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto ab = bl.to_bytes(a), bb = bl.to_bytes(b);
    const std::int32_t ia = ab ? im->vocab.find(*ab) : -1, ib = bb ? im->vocab.find(*bb) : -1;
    const std::int32_t im_id = ia >= 0 && ib >= 0 ? im->vocab.find(*ab + *bb) : -1;
    if (im_id < 0)
      fail("merge " + std::to_string(r) + " '" + std::string(a) + " " + std::string(b) +
           "' uses or makes a token not in the vocab");
    im->merges.insert(ia, ib, {static_cast<std::int32_t>(r), im_id});
  }

  if (const auto* at = top.if_contains("added_tokens"); at && at->is_array()) {
    im->added_index.reserve(at->as_array().size());
    for (const auto& v : at->as_array()) {
      if (!v.is_object()) fail("added_tokens entry is not an object");
      const auto& o = v.as_object();
      const auto* id = o.if_contains("id");
      const auto* content = o.if_contains("content");
      if (!id || !id->is_int64() || !content || !content->is_string() ||
          content->as_string().empty())
        fail("added_tokens entry without integer id and non-empty content");
      auto flag = [&](const char* k) {
        const auto* f = o.if_contains(k);
        return f && f->is_bool() && f->as_bool();
      };
      tok::AddedToken t{std::string(content->as_string()),
                        static_cast<std::int32_t>(id->as_int64()),
                        flag("special"),
                        flag("lstrip"),
                        flag("rstrip"),
                        flag("single_word")};
      if (!im->added_index.insert(t.content, static_cast<std::int32_t>(im->added.size())))
        fail("duplicate added token '" + t.content + "'");
      // HF's ByteLevel decoder: byte-level chars map to their bytes, otherwise the raw text.
      auto bytes = bl.to_bytes(t.content);
      im->set_token(t.id, bytes ? *bytes : t.content, t.special);
      im->added_first[static_cast<unsigned char>(t.content[0])] = true;
      im->added_lengths.push_back(t.content.size());
      im->any_non_special_added |= !t.special;
      im->added.push_back(std::move(t));
    }
    std::sort(im->added_lengths.begin(), im->added_lengths.end(), std::greater<>());
    im->added_lengths.erase(std::unique(im->added_lengths.begin(), im->added_lengths.end()),
                            im->added_lengths.end());
  }

  // tokenizer_config.json: BOS / EOS and whether plain prompts get BOS.
  std::optional<bool> add_bos_cfg;
  std::string bos_text;
  if (!tokenizer_config_json_path.empty() && std::filesystem::exists(tokenizer_config_json_path)) {
    const json::value cfg = parse_json_file(tokenizer_config_json_path);
    const auto& co = cfg.as_object();
    auto lookup = [&](const char* key) -> std::optional<std::int32_t> {
      const std::string s = str_of(co.if_contains(key));
      if (s.empty()) return std::nullopt;
      if (const auto k = im->added_index.find(s); k >= 0)
        return im->added[static_cast<std::size_t>(k)].id;
      if (const auto b = bl.to_bytes(s))
        if (const auto id = im->vocab.find(*b); id >= 0) return id;
      throw ModelError(tokenizer_config_json_path + ": " + key + " '" + s + "' is not a token of " +
                       P);
    };
    im->bos = lookup("bos_token");
    im->eos = lookup("eos_token");
    bos_text = str_of(co.if_contains("bos_token"));
    if (const auto* ab = co.if_contains("add_bos_token"); ab && ab->is_bool())
      add_bos_cfg = ab->as_bool();
  }
  // A TemplateProcessing post-processor (alone, or inside a Sequence as in Meta's files)
  // whose single-sequence template starts with the BOS token.
  auto template_adds_bos = [&](const json::value* pp) {
    if (type_of(pp) != "TemplateProcessing") return false;
    const auto* single = pp->as_object().if_contains("single");
    if (!single || !single->is_array() || single->as_array().empty()) return false;
    const auto& first = single->as_array()[0];
    const auto* st = first.is_object() ? first.as_object().if_contains("SpecialToken") : nullptr;
    const auto* sid = st && st->is_object() ? st->as_object().if_contains("id") : nullptr;
    return sid && sid->is_string() && sid->as_string() == bos_text;
  };
  if (add_bos_cfg) {
    im->adds_bos = *add_bos_cfg && im->bos.has_value();
  } else if (const auto* pp = top.if_contains("post_processor"); im->bos && pp) {
    im->adds_bos = template_adds_bos(pp);
    if (type_of(pp) == "Sequence")
      if (const auto* list = pp->as_object().if_contains("processors"); list && list->is_array())
        for (const auto& p : list->as_array()) im->adds_bos = im->adds_bos || template_adds_bos(&p);
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(im)));
}

}  // namespace strata
