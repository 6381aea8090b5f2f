/* Fuzz harness of the ensemble-file reader (tutti_ensemble_file_read: the
 * member lines, rule/align/adapt/route, and the context-weight and
 * selective-fusion lines of src/fusion/ctxweights_file.c); see
 * fuzz/README.md for the pattern.
 *
 * Input: an ensemble file's bytes (untrusted: files are shared with the
 * models they name).  The reader takes a path, so the bytes go to a
 * temporary file first.  Promises checked (trap when broken): NULL comes
 * with a message that starts "ensemble file "; a file read has 1 to 16
 * members, each with a path, a finite weight or NAN and a temperature the
 * validator accepts; rule, align, adapt, route and select are -1 or valid;
 * the context weights pass tutti_check_context for the file's members.
 * Models are not opened. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tutti.h"

#define CHECK(c)                    \
    do {                            \
        if (!(c)) __builtin_trap(); \
    } while (0)

int tutti_fuzz_ensemble_file_one(const uint8_t *data, size_t size) {
    char path[] = "/tmp/tutti-fuzz-ens-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    size_t off = 0;
    while (off < size) {
        ssize_t k = write(fd, data + off, size - off);
        if (k <= 0) break;
        off += (size_t)k;
    }
    close(fd);
    tutti_ensemble_file *ef = tutti_ensemble_file_read(path);
    unlink(path);
    if (!ef) {
        const char *e = tutti_last_error();
        CHECK(e && strncmp(e, "ensemble file ", 14) == 0);
        return 0;
    }
    CHECK(ef->n_members >= 1 && ef->n_members <= TUTTI_ENSEMBLE_MAX_MEMBERS);
    for (int32_t i = 0; i < ef->n_members; i++) {
        const tutti_member_desc *m = &ef->members[i];
        CHECK(m->model_path && m->model_path[0]);
        CHECK(isnan(m->weight) || isfinite(m->weight));
        CHECK(tutti_check_temp(i + 1, m->temp) == 0);
    }
    CHECK(ef->rule >= -1 && ef->rule <= TUTTI_RULE_CONTRASTIVE);
    CHECK(ef->align >= -1 && ef->align <= TUTTI_ALIGN_SPAN);
    CHECK(ef->adapt == -1 || tutti_check_adapt(ef->adapt) == 0);
    CHECK(ef->route == -1 || tutti_check_route(ef->route) == 0);
    CHECK(ef->select == -1 || (ef->select >= 0 && tutti_check_select(ef->select) == 0));
    CHECK(tutti_check_context(&ef->context, ef->n_members) == 0);
    tutti_ensemble_file_free(ef);
    return 0;
}

#ifdef TUTTI_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tutti_fuzz_ensemble_file_one(data, size);
    return 0;
}
#endif
