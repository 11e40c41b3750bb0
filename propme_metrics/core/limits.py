"""The largest integers PropMe takes from a user, defined once: the CLI's integer options
(`cli.arguments.count`), the tracing options and the task metadata are bounded by them, so a huge
number is refused where it is read, never carried into numpy or a file name."""

#: the largest seed (numpy's and Python's generators take it as it is)
MAX_SEED = 2 ** 63 - 1
#: the largest count, factor, length or size of anything else (no window, sample or count beyond 10^9)
MAX_SIZE = 10 ** 9
