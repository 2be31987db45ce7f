// expect_error: a call must throw E (std::runtime_error unless given) whose
// message contains every given part (the path, the tensor, the problem).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

template <class E = std::runtime_error, class F>
void expect_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << parts[0] << "'";
  } catch (const E& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message: " << e.what() << "\nmissing: " << p;
  }
}
