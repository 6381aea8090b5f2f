#include <stdio.h>
int main(void) { fprintf(stderr, "tutti: not built yet\n"); return 1; }
