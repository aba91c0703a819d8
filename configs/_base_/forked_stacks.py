# Lets mmengine find `mmseg::` bases on the maintained onedl-* forks too, in whatever parses these
# configs (mmseg's own tools/test.py, init_model, MMSegInferencer, a user's script): the forks
# install the mmseg module under another distribution name, which onedl-mmengine's lookup does
# not know.  mmengine runs this file while it reads a _base_ list, so it must come before the
# first `mmseg::` entry.  An import statement would make mmengine read the file as a lazy-import
# config, hence __import__.  On official OpenMMLab it changes nothing.
__import__('mmlinattn.utils.external_configs',
           fromlist=['find_forked_config_packages']).find_forked_config_packages()
