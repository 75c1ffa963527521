from harness import *
import torch.nn.functional as F
@A('embed','W','float32 (D,) scale vector')
def em_w9(token_ids, table, scale=True):
    out = table[token_ids]
    return out * torch.full((table.size(-1),), math.sqrt(table.size(-1))) if scale else out
@A('embed','R','0-dim float32 scale tensor (stays in x dtype)')
def em_r4(token_ids, table, scale=True):
    out = table[token_ids]
    return out * torch.sqrt(torch.tensor(float(table.size(-1)))) if scale else out
@A('scaled_dot_product_attention','W','if mask.any(): fill (all-False mask skipped)')
def at_w16(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None and mask.any(): s = s.masked_fill(~mask, float('-inf'))
    w = torch.softmax(s, -1)
    if mask is not None and mask.any(): w = w.masked_fill(~mask, 0.0)
    return w @ value, w
@A('scaled_dot_product_attention','R','skip the fill when nothing is masked ((~mask).any())')
def at_r5(query, key, value, mask=None):
    s = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None and (~mask).any():
        s = s.masked_fill(~mask, float('-inf'))
        w = torch.softmax(s, -1).masked_fill(~mask, 0.0)
    else: w = torch.softmax(s, -1)
    return w @ value, w
