/* What the kernel did with a memory mapping — the `util` layer, used by the
 * model loader (src/model/load.c) to decide whether weights can be read
 * where the file is mapped.
 *
 * Generation reads every weight once per token, so the page size the
 * weights are mapped with matters (a TLB miss every 4 KiB otherwise).  Linux
 * maps a file's page cache with 2 MiB entries when the cache holds it in
 * 2 MiB folios (ext4 and others, Linux 6.x; readahead makes such folios for
 * a mapping advised MADV_HUGEPAGE), which /proc/self/smaps reports as
 * FilePmdMapped. */
#ifndef TUTTI_UTIL_MEM_H
#define TUTTI_UTIL_MEM_H

#include <stddef.h>
#include <stdint.h>

/* Faults in [addr, addr + len) of a read-only mapping (MADV_POPULATE_READ,
 * Linux 5.14; older kernels: touches a byte per page).  Reads the file
 * from disk where it is not cached, as llama.cpp's MAP_POPULATE does. */
void tutti_mem_populate(const void *addr, size_t len);

/* The share (0..1) of the resident pages of the mapping that holds addr
 * which are mapped by 2 MiB entries (FilePmdMapped + AnonHugePages over
 * Rss of its entry in /proc/self/smaps); -1 when that cannot be told (no
 * /proc, no such mapping, nothing resident).  range (may be NULL) receives
 * the mapping's [start, end) addresses, so that a caller asking about many
 * addresses reads smaps once per mapping. */
double tutti_mem_huge_share(const void *addr, uintptr_t range[2]);

/* Re-reads, into 2 MiB folios, the resident parts of a read-only file
 * mapping that are mapped by 4 KiB entries: map (2 MiB-aligned, else
 * nothing is done) maps size bytes of the file open as fd from offset 0.
 * A file cached by a reader that did not advise MADV_HUGEPAGE (another
 * program, e.g. llama.cpp, reading it first) stays cached in small folios,
 * which no mapping can map by 2 MiB entries: their 2 MiB-aligned chunks are
 * dropped from this mapping and from the page cache (POSIX_FADV_DONTNEED,
 * which leaves the pages other processes map) and faulted in again, so
 * that readahead reads them into 2 MiB folios.  Only chunks wholly inside
 * the file are touched (a partial last chunk cannot be a 2 MiB folio).
 * Stops early (the rest stays as it was) when the first 32 MiB re-read
 * did not come back in 2 MiB folios (a file system without large folios,
 * pages mapped elsewhere) or came slower than 0.5 GB/s (a slow disk,
 * where copying the weights costs less).  Needs PAGEMAP_SCAN (Linux 6.7);
 * without it nothing is done.  Returns the bytes re-read. */
size_t tutti_mem_reread_small(const void *map, size_t size, int fd);

#endif
