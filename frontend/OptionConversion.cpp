//===- OptionConversion.cpp - A written option as its op's attribute ------===//

#include "frontend/OptionConversion.h"

#include "ir/Verifier.h"

namespace spanc::frontend {

llvm::Expected<ir::Attribute> convertOption(const ir::AttrSpec &spec,
                                            ir::Attribute value) {
  std::string problem = ir::checkAttribute(spec, value);
  if (!problem.empty())
    return llvm::make_error<llvm::StringError>(problem,
                                               llvm::inconvertibleErrorCode());
  // The IR keeps a float option a float whatever was written, so that
  // equal options print, compare and hash alike (cse).
  if (spec.type == ir::AttrType::Float && value.isInt())
    return ir::Attribute(value.getNumber());
  return value;
}

} // namespace spanc::frontend
