//===- OptionConversion.h - A written option as its op's attribute --------===//
//
// Both frontends turn an option as written (`gen(temperature = 1) {...}`,
// spnl's `"temperature": 1`) into an op attribute the same way: the op
// table's spec (ir::AttrSpec) gives its type and range, an integer stands
// for a number, and the verifier's ir::checkAttribute says what is wrong.
// Each frontend reports that where the value is written, naming the option
// in its own words ("option 'k' ..." in .span, "'k' ... (at /augment/k)" in
// JSON), so the range checks live once, in the op table and the verifier.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_FRONTEND_OPTIONCONVERSION_H
#define SPANC_FRONTEND_OPTIONCONVERSION_H

#include "ir/IR.h"

#include "llvm/Support/Error.h"

namespace spanc::frontend {

/// `value` as attribute `spec` (an integer given for a float option
/// becomes a float), or an error whose message follows the option's name:
/// "takes an integer, not a float", "must be in [0, 2], got 2.5".
llvm::Expected<ir::Attribute> convertOption(const ir::AttrSpec &spec,
                                            ir::Attribute value);

} // namespace spanc::frontend

#endif // SPANC_FRONTEND_OPTIONCONVERSION_H
