"""Memory that values share with others, under %%burst: pandas' lazy copies (Copy-on-Write, pandas 3) stay lazy
copies (docs/fidelity.md, cause 32), and an array mapped from a file travels (cause 33). Each list of cells runs
plainly, with a new machine per ``%%burst`` cell, and on a warm session (support.threeways)."""

from __future__ import annotations

from support.threeways import assert_identical

FRAME = "pd.DataFrame({'a': [1, 2, 3], 'b': [4.0, 5.0, 6.0]})"

#: Lazy copies made in the kernel (a column, rows, a frame of columns), then written, or their source written, in
#: a %%burst cell: the other one keeps what it had, as in the kernel; and later writes in the kernel agree too.
MADE_IN_THE_KERNEL = [
    "import pandas as pd\n"
    f"df1 = {FRAME}\ns1 = df1['a']\ndf2 = {FRAME}\ns2 = df2['a']\n"
    f"df3 = {FRAME}\nrows = df3.iloc[:2]\ndf4 = {FRAME}\nsub = df4[['b']]",
    "s1.iloc[0] = 100",
    "df2.loc[0, 'a'] = 100",
    "rows.iloc[0, 1] = 0.5",
    "sub.iloc[0, 0] = -1.0",
    "print(df1, s1, df2, s2, df3, rows, df4, sub, sep='\\n')",
    "s2.iloc[1] = 7\ndf1.iloc[2, 0] = 8\nprint(df2, s1, sep='\\n')",
]

#: Lazy copies a %%burst cell makes of the kernel's frame, written in the kernel afterwards or in a later burst
#: cell: the frame keeps its values.
MADE_ON_THE_MACHINE = [
    f"import pandas as pd\ndf = {FRAME}",
    "s = df['a']\nsub = df[['b']]\nrows = df.iloc[:2]",
    "s.iloc[0] = 9\nsub.iloc[0, 0] = -1.0\nrows.iloc[1, 0] = 7\nprint(df)",
    "t = df['b']",
    "t.iloc[2] = 0.0",
    "print(df, t, sep='\\n')",
]

#: An array mapped from a file: read (``np.load(..., mmap_mode="r")``) and written (``np.memmap``, mode w+) in a
#: %%burst cell; what the cell writes reaches the kernel's mapping, hence its file.
MAPPED = [
    "import numpy as np\nnp.save('a.npy', np.arange(10.0))\n"
    "m = np.memmap('x.dat', dtype='float32', mode='w+', shape=(4,))",
    "r = np.load('a.npy', mmap_mode='r')",
    "float(r.sum()), type(r).__name__, r[3]",
    "m[0] = 5\nm.flush()",
    "np.fromfile('x.dat', dtype='float32')",
]


def test_lazy_copies_made_in_the_kernel_stay_lazy_copies_where_a_cell_writes_them(burst_env, tmp_path):
    assert_identical(MADE_IN_THE_KERNEL, {1, 2, 3, 4}, tmp_path)


def test_lazy_copies_a_cell_makes_of_the_kernels_frame_stay_lazy_copies_in_the_kernel(burst_env, tmp_path):
    assert_identical(MADE_ON_THE_MACHINE, {1, 3, 4}, tmp_path)


def test_an_array_mapped_from_a_file_travels_and_a_write_reaches_the_kernels_mapping(burst_env, tmp_path):
    assert_identical(MAPPED, {1, 2, 3}, tmp_path)
