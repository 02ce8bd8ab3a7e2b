// Whole-file reads of the configuration and model files (config.json, tokenizer.json, chat
// templates, YAML): one place, one error.
#pragma once

#include <string>

namespace strata {

// The bytes of the file at `path`. Throws ModelError naming the path when it cannot be read.
std::string read_text_file(const std::string& path);

}  // namespace strata
