"""mmengine's ``CheckpointHook`` with saves that cannot destroy the last good checkpoint."""
import os
import os.path as osp

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook
from mmengine.runner import Runner

from ..registry import HOOKS

LAST_CHECKPOINT = 'last_checkpoint'


def _partial_name(path: str) -> str:
    """Where ``path`` is written before it gets its name: same directory (so the rename
    is atomic), hidden, and not matched by ``*.pth``."""
    head, tail = osp.split(path)
    return osp.join(head, f'.{tail}.part')


def _discard(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path: str) -> None:
    # a rename survives a crash only once its directory entry is on disk; POSIX only
    # (Windows cannot open a directory)
    if os.name != 'posix':
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_with(path: str, write) -> None:
    """``write(partial)`` writes the new content of ``path`` into ``partial``; it is synced
    and renamed over ``path``.  Until the rename ``path`` is untouched; on any error the
    partial file is removed and the error propagates."""
    partial = _partial_name(path)
    try:
        write(partial)
        with open(partial, 'rb+') as f:  # the writer closed it; sync what it wrote
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        _discard(partial)
        raise
    _fsync_dir(osp.dirname(path) or '.')


def _write_text(text: str, path: str) -> None:
    with open(path, 'w') as f:
        f.write(text)


def _explain(runner, err, what, intact) -> None:
    """Log what failed and what is left, and add it to ``err``'s traceback."""
    message = f'saving {what} failed ({type(err).__name__}: {err}); {intact}'
    runner.logger.error(message)
    if hasattr(err, 'add_note'):  # Python >= 3.11
        err.add_note(message)


class _DeferredRemoval:
    """The hook's file backend with ``remove`` / ``rmtree`` postponed until
    :meth:`apply`: mmengine deletes the previous best checkpoint before it saves the new
    one."""

    def __init__(self, backend):
        self._backend = backend
        self.paths = []

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def remove(self, path):
        self.paths.append(path)

    rmtree = remove

    def apply(self, keep=()):
        for path in self.paths:
            if path in keep:  # a new best saved under the old one's name
                continue
            if self._backend.isfile(path):
                self._backend.remove(path)
            elif self._backend.isdir(path):
                self._backend.rmtree(path)


@HOOKS.register_module()
class SafeCheckpointHook(CheckpointHook):
    """``CheckpointHook`` (same arguments) whose failed save leaves the previous checkpoint
    usable.

    mmengine 0.10 deletes the checkpoint that ``max_keep_ckpts`` drops (and the previous
    best one) *before* it writes the new one, and writes in place: a save that fails (disk
    full, file-size limit) leaves a truncated file, the previous checkpoint gone, and
    ``last_checkpoint`` naming a missing file, so ``--resume`` has nothing to resume from.
    Here every checkpoint, and ``last_checkpoint``, is written under a temporary name in its
    directory, synced and renamed over its final name; ``last_checkpoint`` moves to the new
    checkpoint next, and only then are outdated checkpoints (and the previous best) deleted.
    A failed save removes its partial file and re-raises the error, with a note naming the
    file and the checkpoint that is intact; training stops as with mmengine's hook.  Saved
    files, their content and pruning are otherwise mmengine's.

    Only checkpoints on the local filesystem, saved by mmengine's ``Runner``, get this.  An
    ``out_dir`` on another storage (``backend_args``, ``file_client_args``, a URI) or a
    ``FlexibleRunner`` (whose strategies may save directories from every rank) keeps the
    parent's behaviour.  ``_publish_model`` (``published_keys``) is the parent's: it writes a
    new file and deletes nothing.
    """

    def _is_safe(self, runner) -> bool:
        # _DeferredRemoval wraps the local backend during a best save
        return (isinstance(self.file_backend, (LocalBackend, _DeferredRemoval))
                and isinstance(runner, Runner))

    def _save_file(self, runner, out_dir, filename, intact, *args, **kwargs) -> None:
        """``runner.save_checkpoint(out_dir, filename, ...)`` through
        :func:`replace_with`; ``intact()`` says what a failure leaves intact."""
        def save(partial):
            # the class's method: during a best save the instance's is this one
            type(runner).save_checkpoint(runner, osp.dirname(partial), osp.basename(partial),
                                         *args, **kwargs)
        path = osp.join(out_dir, filename)
        if not is_main_process():  # mmengine's Runner saves on rank 0 only
            return save(_partial_name(path))
        try:
            replace_with(path, save)
        except BaseException as err:
            _explain(runner, err, f'checkpoint {path}',
                     f'nothing was overwritten or deleted: {intact()}')
            raise

    def _intact(self, runner, best=()) -> str:
        try:
            with open(osp.join(runner.work_dir, LAST_CHECKPOINT)) as f:
                last = f.read().strip()
        except OSError:
            last = ''
        text = (f'the previous checkpoint {last} ({LAST_CHECKPOINT} names it) is intact'
                if last else 'no earlier checkpoint had been saved')
        if best:
            text += f'; so is the previous best checkpoint {", ".join(best)}'
        return text

    def _save_checkpoint_with_step(self, runner, step, meta):
        if not self._is_safe(runner):
            return super()._save_checkpoint_with_step(runner, step, meta)
        # mmengine's bookkeeping, first: the checkpoint stores it; only deleting waits
        outdated = []
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids
                                            and self.keep_ckpt_ids[-1] == step):
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                outdated.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))
        filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)

        self._save_file(runner, self.out_dir, filename, lambda: self._intact(runner),
                        save_optimizer=self.save_optimizer,
                        save_param_scheduler=self.save_param_scheduler, meta=meta,
                        by_epoch=self.by_epoch, backend_args=self.backend_args, **self.args)
        if not is_main_process():
            return
        # last_checkpoint moves before the old files go: it never names a deleted one
        last = osp.join(runner.work_dir, LAST_CHECKPOINT)
        try:
            replace_with(last, lambda partial: _write_text(self.last_ckpt, partial))
        except BaseException as err:
            _explain(runner, err, last, f'{self.last_ckpt} is saved, but nothing was deleted '
                     f'and {self._intact(runner)}')
            raise
        for old in outdated:
            path = self.file_backend.join_path(self.out_dir, self.filename_tmpl.format(old))
            if self.file_backend.isfile(path):
                self.file_backend.remove(path)
            elif self.file_backend.isdir(path):
                self.file_backend.rmtree(path)

    def _save_best_checkpoint(self, runner, metrics) -> None:
        if not self.save_best or not self._is_safe(runner):
            return super()._save_best_checkpoint(runner, metrics)
        # The parent's selection and naming, with its deletions postponed and its
        # runner.save_checkpoint calls routed through _save_file for this call only.
        backend = self.file_backend
        self.file_backend = deferred = _DeferredRemoval(backend)

        def save(out_dir, filename, *args, **kwargs):
            self._save_file(runner, out_dir, filename,
                            lambda: self._intact(runner, deferred.paths), *args, **kwargs)
        runner.save_checkpoint = save
        try:
            super()._save_best_checkpoint(runner, metrics)
        finally:
            del runner.save_checkpoint
            self.file_backend = backend
        if is_main_process():
            current = [getattr(self, 'best_ckpt_path', None),
                       *getattr(self, 'best_ckpt_path_dict', {}).values()]
            deferred.apply(keep=current)
