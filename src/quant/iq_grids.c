/* The i-quant codebooks and sign table (quant_impl.h), generated from the
 * format's definition by gen_iq_grids.py. */
#include "quant/quant_impl.h"

#include "quant/iq_grids.inc"
