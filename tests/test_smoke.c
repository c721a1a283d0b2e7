#include "test.h"
TEST(smoke, runner_works) { CHECK(1 + 1 == 2); }
