"""The page cache, dropped so that the next reads go to the device (no dependencies: every bench script can use it)."""

import os


def drop_caches(required: bool = True) -> bool:
    """`sync`, then `echo 3 > /proc/sys/vm/drop_caches`. That needs root: without it this raises when `required`,
    else returns False (the caller says the page cache was not dropped)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        if required:
            raise
        return False
    return True
