"""Build of the optional compiled fast path; everything else about the package is pyproject.toml.

`optional=True`: without a working C compiler the build warns and installs the pure-Python
package, which replog.storage.records, replog.spark_io.records and replog.net.frame_check fall
back to.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "replog.storage._fastbatch",
            sources=["src/replog/storage/_fastbatch.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "replog.spark_io._fastrecords",
            sources=["src/replog/spark_io/_fastrecords.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
        Extension(
            "replog.net._framecheck",
            sources=["src/replog/net/_framecheck.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
