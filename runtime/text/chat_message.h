// One chat message (OpenAI's shape), formatted by runtime/text/chat_template.h.
#pragma once

#include <string>

namespace strata {

struct ChatMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
};

}  // namespace strata
