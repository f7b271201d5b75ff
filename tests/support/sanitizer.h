// Whether this test binary runs under AddressSanitizer (scripts/test.sh's second build). GCC and
// clang define __SANITIZE_ADDRESS__ or have __has_feature(address_sanitizer) there. Tests that run
// zoo-sized models many times use it to run in the release build only: under ASan they take minutes
// and exercise no code the small-model tests of the same build do not.
#pragma once

namespace qs::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace qs::test
