# What every config adds to mmdet's / mmseg's default_runtime.py: the import that registers the
# mmlinattn backbones and hooks, and the hook that keeps batch padding out of the backbone (an
# image gets the same features alone or batched with larger images; docs/advanced/batch_independence.md).
custom_imports = dict(imports=['mmlinattn.models', 'mmlinattn.engine'],
                      allow_failed_imports=False)
custom_hooks = [dict(type='mmlinattn.ValidRegionHook')]
