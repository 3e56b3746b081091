//===- Version.h - The spanc version string -------------------------------===//
#ifndef SPANC_TOOLS_SPANC_VERSION_H
#define SPANC_TOOLS_SPANC_VERSION_H

namespace spanc {
inline constexpr const char *kVersion = "0.1.0";
} // namespace spanc

#endif // SPANC_TOOLS_SPANC_VERSION_H
