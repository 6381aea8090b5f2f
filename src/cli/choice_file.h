/* Multiple-choice items from a JSON-lines file, one object a line:
 * {"context": "...", "choices": ["...", ...], "label": K} (eval --choices,
 * fit --choices).  The strings stay in the parsed cJSON trees. */
#ifndef TUTTI_CLI_CHOICE_FILE_H
#define TUTTI_CLI_CHOICE_FILE_H

#include <cJSON.h>

#include "tutti.h"

typedef struct choice_file {
    cJSON **lines;
    tutti_choice_item *items;
    const char **choices; /* [n * TUTTI_MAX_CHOICES] */
    int n;
} choice_file;

/* 0, or 1 after printing what is wrong (the line, the field). */
int choice_file_read(const char *path, choice_file *c);
void choice_file_free(choice_file *c);

#endif
