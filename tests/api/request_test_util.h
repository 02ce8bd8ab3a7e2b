// Shared set-up of the request-parsing tests (tests/api/*_test.cpp): the parse context of a
// served model "tiny" (vocabulary 1000, context 256).
#pragma once

#include "api/openai_request.h"

namespace strata::api::test {

inline ParseContext tiny_context() {
  ParseContext c;
  c.model_names = {"tiny"};
  c.vocab_size = 1000;
  c.max_model_len = 256;
  return c;
}

}  // namespace strata::api::test
