//===- Backend.cpp - A device that runs forward steps over paged K/V ------===//

#include "runtime/backend/Backend.h"

namespace spanc::backend {

// Anchors the vtable here.
Backend::~Backend() = default;

} // namespace spanc::backend
