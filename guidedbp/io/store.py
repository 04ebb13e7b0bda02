"""Object storage: URLs (``s3://bucket/prefix/``, ``gs://``, ``az://``...) wherever a path goes.

Every function here takes a URL and goes through `fsspec <https://filesystem-spec.
readthedocs.io>`_ and the store's own library (s3fs, gcsfs, adlfs: the extras
``guidedbp[s3]``, ``[gcs]``, ``[azure]``). Credentials and endpoints come from that
library's usual environment and config (``AWS_ENDPOINT_URL``, ``AWS_PROFILE``,
``GOOGLE_APPLICATION_CREDENTIALS``, ...): guidedbp adds none of its own.

An object store has no rename and no append, but a PUT is whole or nothing: an object
appears complete or not at all, so :func:`put` is guidedbp's atomic write there.
:func:`put` with ``create=True`` is a conditional write (``If-None-Match: *``): it
fails with :class:`FileExistsError` when the key is taken. Stores that ignore the
condition are found out by :func:`honours_create` (the output lock asks once per run).

Local paths never come here: :func:`is_url` tells them apart (a ``scheme://`` prefix;
``file://`` is a local path too, and is refused as a URL so that it is not taken for
a folder named ``file:``).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Iterator

from guidedbp._extras import needs
from guidedbp.errors import GuidedbpError

__all__ = ["StoreError", "honours_create", "is_url", "join", "put", "read_bytes",
           "read_range", "size_of", "walk"]

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
#: The extra that brings each protocol's library.
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure",
           "abfs": "azure", "abfss": "azure", "adl": "azure"}


class StoreError(GuidedbpError):
    """A URL that cannot be used: its library is missing, or the store refused."""


#: The store libraries whose own errors are not OSErrors (botocore's NoCredentialsError,
#: google.auth's DefaultCredentialsError, azure.core's ClientAuthenticationError, ...).
_LIBRARIES = frozenset({"botocore", "aiobotocore", "s3fs", "google", "gcsfs", "azure",
                        "adlfs", "aiohttp"})


def _foreign(error: Exception) -> OSError | None:
    if isinstance(error, OSError) or type(error).__module__.split(".")[0] not in _LIBRARIES:
        return None
    return OSError(describe(error))


def _store_errors(function):
    """A store library's own error (missing credentials, an endpoint that does not
    answer) raised as an ``OSError`` with its message: the user's to fix, as a refusal
    is, not a bug of guidedbp's."""
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def generator(*args, **kwargs):
            try:
                yield from function(*args, **kwargs)
            except Exception as error:
                translated = _foreign(error)
                if translated is None:
                    raise
                raise translated from None
        return generator

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except Exception as error:
            translated = _foreign(error)
            if translated is None:
                raise
            raise translated from None
    return wrapper


def is_url(path: object) -> bool:
    """Whether ``path`` is a URL with a scheme (``s3://b/k``), not a local path.

    >>> is_url("s3://bucket/photos/"), is_url("photos/cat.jpg"), is_url("C:/x")
    (True, False, False)
    """
    return isinstance(path, str) and _SCHEME.match(path) is not None


def scheme(url: str) -> str:
    """``"s3"`` of ``s3://bucket/key``."""
    return _SCHEME.match(url)[1].lower()


def join(base: str, *parts: str) -> str:
    """``base/part/...`` with one ``/`` between parts (a URL's path is ``/``-separated).

    >>> join("s3://b/out/", "a", "x.png")
    's3://b/out/a/x.png'
    """
    return "/".join([base.rstrip("/"), *(part.strip("/") for part in parts)])


def _protocol_key(url: str) -> str:
    return scheme(url)


@functools.lru_cache(maxsize=None)
def _filesystem(protocol: str):
    try:
        import fsspec
    except ImportError:
        raise StoreError(_missing(protocol)) from None
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as error:
        if isinstance(error, ValueError) and protocol not in _EXTRAS:
            raise StoreError(f"{protocol}:// is not a storage protocol fsspec knows "
                             f"({error})") from None
        raise StoreError(_missing(protocol)) from None
    # No listing cache: a long run lists each prefix once, and a cache would hold every
    # listing it ever made (memory growing with the bucket), and hide objects that change.
    return cls(use_listings_cache=False, skip_instance_cache=True)


def _missing(protocol: str) -> str:
    extra = _EXTRAS.get(protocol)
    if extra is None:
        return f"{protocol}:// URLs need fsspec and {protocol}'s fsspec library"
    return needs(f"{protocol}:// URLs", extra)


def filesystem(url: str):
    """The fsspec filesystem for ``url``'s protocol (one per protocol and process).

    Raises:
        StoreError: The protocol's library is missing (naming the extra).
    """
    return _filesystem(_protocol_key(url))


def _path(url: str) -> str:
    return url.split("://", 1)[1]


def describe(error: BaseException) -> str:
    """A store error in a few words: what the library said, on one line."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:200]


@_store_errors
def read_bytes(url: str, limit: int | None = None) -> bytes:
    """The whole object (an object larger than ``limit`` bytes is refused unread).

    Raises:
        FileNotFoundError: No such object.
        OSError: The store refused (``PermissionError`` for access denied), or the
            object is over ``limit``.
    """
    fs = filesystem(url)
    # One ranged GET (s3fs asks for the size with a HEAD first where no range is given):
    # with a limit, of at most limit + 1 bytes, so that an object over it is found out
    # by what came and is never read whole.
    try:
        data = fs.cat_file(_path(url), start=0, end=None if limit is None else limit + 1)
    except FileNotFoundError:
        raise
    except OSError:
        if size_of(url) == 0:  # S3 refuses any range of an empty object (416)
            return b""
        raise
    if limit is not None and len(data) > limit:
        size = size_of(url)
        raise OSError(f"{url}: {size} bytes, over the {limit} a file here may have")
    return data


@_store_errors
def read_range(url: str, start: int, end: int) -> bytes | None:
    """Bytes ``start`` to ``end`` of an object (negative: from its end), or ``None``
    when there is no such object."""
    try:
        return filesystem(url).cat_file(_path(url), start=start, end=end)
    except FileNotFoundError:
        return None


def head_and_tail(url: str, head: int, tail: int) -> tuple[bytes, bytes, int] | None:
    """An object's first ``head`` and last ``tail`` bytes and its size (two ranged reads
    and a HEAD); ``None`` when there is no object (a prefix is none)."""
    size = size_of(url)
    if size is None:
        return None
    first = read_range(url, 0, min(head, size)) if size else b""
    last = read_range(url, max(0, size - tail), size) if size else b""
    if first is None or last is None:
        return None
    return first, last, size


@_store_errors
def size_of(url: str) -> int | None:
    """The object's size in bytes; ``None`` when there is none (or it is a prefix)."""
    try:
        info = filesystem(url).info(_path(url))
    except FileNotFoundError:
        return None
    return int(info["size"]) if info.get("type") == "file" else None


@_store_errors
def version(url: str) -> tuple[int, str | None]:
    """An object's ``(size, ETag)`` (one HEAD): the ETag is the store's digest of its
    content, which any new upload changes (``None`` from a store that gives none).

    Raises:
        FileNotFoundError: No such object.
        OSError: The store refused.
    """
    info = filesystem(url).info(_path(url))
    if info.get("type") != "file":
        raise FileNotFoundError(f"{url}: no such object")
    return _version(info)


def _version(info: dict) -> tuple[int, str | None]:
    """``(size, ETag)`` of a listing's or a HEAD's entry (s3fs says ``ETag``, gcsfs and
    adlfs ``etag``), the ETag without its quotes."""
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    return int(info.get("size") or 0), None if etag is None else str(etag).strip('"')


def exists(url: str) -> bool:
    """Whether an object is at ``url``."""
    return size_of(url) is not None


@_store_errors
def is_prefix(url: str) -> bool:
    """Whether ``url`` names a prefix ("folder") with objects below it, or a bucket."""
    try:
        return filesystem(url).isdir(_path(url))
    except FileNotFoundError:
        return False


@_store_errors
def put(url: str, data: bytes, create: bool = False) -> None:
    """Write an object whole (a PUT: readers see the old object or the new one).

    Args:
        create: Write only where no object is (``If-None-Match: *``).

    Raises:
        FileExistsError: With ``create``, an object is there already.
        OSError: The store refused.
    """
    fs = filesystem(url)
    if create:
        fs.pipe_file(_path(url), bytes(data), mode="create")
    else:
        fs.pipe_file(_path(url), bytes(data))


@_store_errors
def delete(url: str) -> None:
    """Remove an object; one that is gone already is no error."""
    try:
        filesystem(url).rm_file(_path(url))
    except FileNotFoundError:
        pass


@_store_errors
def honours_create(url: str) -> bool:
    """Whether the store refuses a second conditional create of the object at ``url``
    (which must exist, and be ours: it is written again, with the same bytes, where the
    store ignores the condition)."""
    data = read_bytes(url)
    try:
        put(url, data, create=True)
    except FileExistsError:
        return True
    except (NotImplementedError, TypeError, ValueError):
        return False
    return False


@_store_errors
def walk(url: str, recursive: bool = True, odd: list[tuple[str, int | None]] | None = None,
         versions: dict[str, tuple] | None = None) -> Iterator[tuple[str, list[str], list[str]]]:
    """``(prefix URL, sorted sub-prefix names, sorted object names)`` below ``url``,
    one prefix at a time (a listing of one prefix is held at once, never the bucket's),
    files of a prefix before its sub-prefixes, as :func:`guidedbp.io.inputs` walks
    folders.

    An object whose key has an empty segment (``a//b.png``, ``a/b.png/``, ``/``) has no
    name of its own in a prefix: it is never among the names, and with ``odd`` (a list)
    each one below ``url`` is appended to it as ``(object URL, size)``, once its prefix is
    walked: a prefix's own key (``a/``, the folder marker a console's "create folder"
    writes) with the prefix, and the objects below an empty-named sub-prefix (``a//``)
    where a recursive walk would enter it, in one listing (the store's library lists
    such a prefix only through ``find(path, prefix="/")``, as s3fs and gcsfs do).

    With ``versions`` (a dict), each object's ``(size, ETag)`` as the listing gives
    them (:func:`version`) is put in it by URL.
    """
    fs = filesystem(url)
    protocol = scheme(url)
    stack = [_path(url).rstrip("/")]
    while stack:
        current = stack.pop()
        try:
            entries = fs.ls(current, detail=True)
        except FileNotFoundError:
            continue
        folders, files, unnamed = [], [], False
        for entry in entries:
            if entry["name"].rstrip("/") == current:  # the key current/, or current// ...
                if entry.get("type") == "directory":
                    unnamed = True
                elif odd is not None:
                    odd.append((f"{protocol}://{current}/", entry.get("size")))
                continue
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            if entry.get("type") == "directory":
                folders.append(name)
            elif name:
                files.append(name)
                if versions is not None:
                    versions[f"{protocol}://{current}/{name}"] = _version(entry)
        del entries
        folders.sort()
        files.sort()
        yield f"{protocol}://{current}", folders, files
        if unnamed and recursive and odd is not None:
            odd.extend(_below_empty_segment(fs, protocol, current))
        if recursive:
            stack.extend(f"{current}/{name}" for name in reversed(folders))


def _below_empty_segment(fs, protocol: str, prefix: str) -> list[tuple[str, int | None]]:
    """``(URL, size)`` of every object whose key starts ``prefix//``, sorted; where the
    store's library cannot list them, the prefix ``prefix//`` itself, size unknown."""
    try:
        found = fs.find(prefix, prefix="/", detail=True)
    except TypeError:  # a library whose find takes no prefix
        return [(f"{protocol}://{prefix}//", None)]
    return sorted((f"{protocol}://{name}", info.get("size")) for name, info in found.items()
                  if info.get("type", "file") == "file")


def bucket_of(url: str) -> str:
    """``s3://bucket`` of ``s3://bucket/key``.

    >>> bucket_of("s3://photos/maps/"), bucket_of("gs://b")
    ('s3://photos', 'gs://b')
    """
    return f"{scheme(url)}://{_path(url).split('/', 1)[0]}"


def missing_bucket(url: str) -> str | None:
    """``"the bucket 's3://b' does not exist"`` where the bucket of ``url`` does not, else
    ``None``: what to say when a URL names nothing (one HEAD request)."""
    return None if bucket_exists(url) else f"the bucket {bucket_of(url)!r} does not exist"


@_store_errors
def bucket_exists(url: str) -> bool:
    """Whether the bucket (container) of ``url`` exists: ``False`` only where the store
    says there is no such bucket (one HEAD request).

    Raises:
        OSError: The store refused to say (``PermissionError``: access denied).
    """
    try:
        filesystem(url).info(_path(bucket_of(url)))
    except FileNotFoundError:
        return False
    return True


@_store_errors
def glob(pattern: str, versions: dict[str, tuple] | None = None) -> list[str]:
    """The object URLs matching a glob pattern (``s3://b/photos/*/*.jpg``), sorted; with
    ``versions`` (a dict), each one's ``(size, ETag)`` put in it by URL."""
    fs = filesystem(pattern)
    protocol = scheme(pattern)
    found = fs.glob(_path(pattern), detail=True)
    urls = {f"{protocol}://{name}": info for name, info in found.items()
            if info.get("type") == "file"}
    if versions is not None:
        versions.update({url: _version(info) for url, info in urls.items()})
    return sorted(urls)
